"""The Telegram adapter against telegram-test-api, a real HTTP Bot API server someone else wrote (npm, 4.2.x; see
tests/adapter/telegram_peer.py for the small shim in front of it): long polling and the webhook, a direct chat
answered, receipts with Telegram's message ids, recall, the 4,096-character split, 429 waited out, and every
refused config and request.

What this peer cannot check (it has no files and no groups): media and groups are covered against
aiogram-test-framework in tests/adapter/test_telegram_offline.py.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from aiogram.types import Message

from core.adapter import AdapterError, adapter_class, build_adapters
from core.chat import KiraMessageEvent, MessageChain, Session
from core.chat.message_elements import At, Reply, Text
from core.config import HookchatConfig
from core.plugin import BasePlugin, Priority, on
from core.testing import ScriptedProvider
from tests.adapter import telegram_peer
from tests.adapter.closing_server import ClosingServer
from tests.adapter.conftest import running_bot
from tests.adapter.telegram_peer import BOT_ID, BOT_TOKEN, SECRET_HEADER, TelegramTestApi, free_port

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="session")
def telegram_api() -> Iterator[TelegramTestApi]:
    reason = telegram_peer.missing()
    if reason:
        pytest.skip(reason)
    api = TelegramTestApi()
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", BOT_TOKEN)
    monkeypatch.setenv("TELEGRAM_WEBHOOK_SECRET", "s3cret-token_1")
    return BOT_TOKEN


def recorder(seen: list[KiraMessageEvent]) -> type[BasePlugin]:
    class Recorder(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 1)
        async def record(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            seen.append(event)

    return Recorder


async def bot_messages(api: TelegramTestApi, chat_id: int, count: int) -> list[dict[str, Any]]:
    """Wait until the bot has sent `count` messages to `chat_id` (bounded by the caller's timeout)."""
    got: list[dict[str, Any]] = []
    while len(got) < count:
        got += await anyio.to_thread.run_sync(api.bot_messages, chat_id)
        await anyio.sleep(0.05)
    return got


async def test_a_direct_message_is_answered_by_long_polling(telegram_api: TelegramTestApi, token: str):
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=5)
    seen: list[KiraMessageEvent] = []
    async with running_bot(adapter, ScriptedProvider(["Hi Ann!"]), plugins=[recorder(seen)]):
        with anyio.fail_after(15):
            await anyio.to_thread.run_sync(lambda: telegram_api.user_message("hello bot", chat_id=101, user_id=101))
            sent = await bot_messages(telegram_api, 101, 1)
    assert adapter.me is not None and adapter.me.id == BOT_ID and adapter.me.username == "TestNameBot"
    assert sent[0]["message"]["text"] == "Hi Ann!"
    message = seen[0].message
    assert message.session.sid == "tg:dm:101" and message.sender.user_id == "101" and message.sender.nickname == "Ann"
    assert message.is_mentioned and message.chain == MessageChain([Text("hello bot")])
    assert message.message_id.isdigit() and 1e9 < message.timestamp < 1e11  # seconds, after the shim's fix
    raw = message.raw  # what plugins call the Bot API with: aiogram's Message, bound to the adapter's bot
    assert isinstance(raw, Message) and raw.bot is adapter.bot
    assert (raw.text, raw.chat.id, str(raw.message_id)) == ("hello bot", 101, message.message_id)


async def test_receipts_carry_telegram_ids_and_recall_deletes_every_part(telegram_api: TelegramTestApi, token):
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=1)
    long = "word " * 1500  # 7,500 characters: two messages
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(15):
            receipt = await adapter.send(
                Session("tg", "dm", "102"),
                MessageChain([Reply("7"), Text("hi "), At("@ann"), Text(" and "), At("55", "Bob"), Text(" " + long)]),
            )
            sent = await bot_messages(telegram_api, 102, 2)
            before = {m["messageId"] for m in await anyio.to_thread.run_sync(telegram_api.history)}
            await adapter.recall(receipt)
            after = {m["messageId"] for m in await anyio.to_thread.run_sync(telegram_api.history)}
    assert receipt.ok and len(receipt.message_ids) == 2 and receipt.message_id == receipt.message_ids[0]
    assert [str(m["messageId"]) for m in sent] == list(receipt.message_ids)
    first, second = (m["message"] for m in sent)
    assert len(first["text"]) <= 4096 and len(second["text"]) <= 4096
    assert (first["text"] + " " + second["text"]).split() == ("hi @ann and Bob " + long).split()
    assert first["text"].startswith("hi @ann and Bob word") and not first["text"].endswith("wor")
    assert first["reply_parameters"] == {"message_id": 7, "allow_sending_without_reply": True}  # a JSON body
    assert first["entities"] == [
        {"type": "text_mention", "offset": 12, "length": 3, "user": {"id": 55, "is_bot": False, "first_name": "Bob"}}
    ]
    assert "reply_parameters" not in second
    assert {int(i) for i in receipt.message_ids} <= before and not {int(i) for i in receipt.message_ids} & after


async def test_a_429_is_waited_out_and_the_send_tried_again(telegram_api: TelegramTestApi, token):
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=1)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(15):
            telegram_api.rate_limit("sendMessage", 1)
            receipt = await adapter.send(Session("tg", "dm", "103"), MessageChain([Text("after the wait")]))
            sent = await bot_messages(telegram_api, 103, 1)
    assert receipt.ok and sent[0]["message"]["text"] == "after the wait"
    tries = [t for t, method in telegram_api.calls if method == "sendMessage"][-2:]
    assert tries[1] - tries[0] >= 0.9  # the second try came after retry_after


async def test_a_429_longer_than_max_retry_after_fails_the_send_with_telegrams_words(telegram_api, token):
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=1, max_retry_after=0)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(15):
            telegram_api.rate_limit("sendMessage", 30)
            receipt = await adapter.send(Session("tg", "dm", "104"), MessageChain([Text("too soon")]))
    assert not receipt.ok and "retry after 30" in receipt.error


async def test_a_reply_written_as_the_server_closes_the_idle_connection_is_sent_once_more_not_lost(token):
    # Telegram (or a proxy before it) closing a kept-alive connection as a sendMessage is written on it: the request
    # meets the connection's end before any answer, was never read, and goes again on a new connection.
    sent = b'{"ok":true,"result":{"message_id":7,"date":1,"chat":{"id":106,"type":"private"},"text":"x"}}'
    async with ClosingServer(sent) as server:
        adapter = adapter_class("telegram")("tg", api_url=server.url)
        try:
            first = await adapter.send(Session("tg", "dm", "106"), MessageChain([Text("one")]))
            server.end(0)  # the server's keep-alive limit, before the adapter has seen it
            second = await adapter.send(Session("tg", "dm", "106"), MessageChain([Text("two")]))
        finally:
            await adapter.stop()
    assert first.ok and second.ok and second.message_id == "7", second.error
    assert [(number, line.split(b" ")[1].rsplit(b"/", 1)[1]) for number, line in server.requests] == [
        (0, b"sendMessage"),
        (1, b"sendMessage"),  # once, on a new connection
    ]


async def test_a_refused_send_is_a_failed_receipt_not_an_exception(telegram_api, token):
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=1)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(15):
            gone = await adapter.send(Session("tg", "dm", "105"), MessageChain([Text("x")]))
            with pytest.raises(Exception, match="wasn't found"):  # deleting twice: the server's 400
                await adapter.recall(gone)
                await adapter.recall(gone)
            empty = await adapter.send(Session("tg", "dm", "105"), MessageChain([]))
    assert gone.ok and not empty.ok and "nothing to send" in empty.error


async def test_a_request_middleware_on_the_bots_session_sees_every_request(telegram_api: TelegramTestApi, token):
    # The adapter sends its messages and polls without aiogram's models while nothing else is registered on
    # `adapter.bot.session`; a plugin's middleware still sees every request.
    adapter = adapter_class("telegram")("tg", api_url=telegram_api.api_url, poll_timeout=1)
    called: list[str] = []

    async def middleware(make_request: Any, bot: Any, method: Any) -> Any:
        called.append(method.__api_method__)
        return await make_request(bot, method)

    adapter.bot.session.middleware(middleware)
    async with running_bot(adapter, ScriptedProvider(["Seen"])):
        with anyio.fail_after(15):
            await anyio.to_thread.run_sync(lambda: telegram_api.user_message("watched", chat_id=107, user_id=107))
            sent = await bot_messages(telegram_api, 107, 1)
    assert sent[0]["message"]["text"] == "Seen"
    assert {"getMe", "getUpdates", "sendMessage"} <= set(called)


async def test_the_webhook_delivers_updates_with_the_secret_token(telegram_api: TelegramTestApi, token):
    port = free_port()
    adapter = adapter_class("telegram")(
        "tg",
        api_url=telegram_api.api_url,
        mode="webhook",
        port=port,
        webhook_url=f"http://127.0.0.1:{port}/telegram/webhook",
    )
    try:
        async with running_bot(adapter, ScriptedProvider(["Hooked!"])):
            with anyio.fail_after(15):
                while BOT_TOKEN not in telegram_api.webhooks:
                    await anyio.sleep(0.05)
                assert telegram_api.webhooks[BOT_TOKEN][1] == "s3cret-token_1"
                await anyio.to_thread.run_sync(lambda: telegram_api.user_message("via webhook", chat_id=106))
                sent = await bot_messages(telegram_api, 106, 1)
    finally:
        telegram_api.webhooks.pop(BOT_TOKEN, None)
        await anyio.to_thread.run_sync(lambda: httpx.post(f"{telegram_api.upstream}/bot{BOT_TOKEN}/deleteWebhook"))
    assert sent[0]["message"]["text"] == "Hooked!"


async def test_the_webhook_listener_refuses_what_is_not_telegram(token):
    port = free_port()
    adapter = adapter_class("telegram")(
        "tg",
        api_url="http://127.0.0.1:9",
        mode="webhook",
        port=port,
        webhook_url="https://bot.example/hook",
        max_body_bytes=2048,
    )
    url = f"http://127.0.0.1:{port}/telegram/webhook"
    update = {
        "update_id": 1,
        "message": {"message_id": 1, "date": 1700000000, "text": "x", "chat": {"id": 1, "type": "private"}},
    }
    async with running_bot(adapter, ScriptedProvider()):
        async with httpx.AsyncClient(timeout=10) as http:
            nothing = await http.post(url, json=update)
            wrong = await http.post(url, json=update, headers={SECRET_HEADER: "guess"})
            browser = await http.post(
                url, json=update, headers={SECRET_HEADER: "s3cret-token_1", "Origin": "https://evil.example"}
            )
            huge = await http.post(url, content=b"{" + b" " * 4096 + b"}", headers={SECRET_HEADER: "s3cret-token_1"})
            junk = await http.post(url, content=b"[1, 2", headers={SECRET_HEADER: "s3cret-token_1"})
            other_path = await http.post(url + "x", json=update, headers={SECRET_HEADER: "s3cret-token_1"})
    assert (nothing.status_code, wrong.status_code, browser.status_code) == (401, 403, 403)
    assert (huge.status_code, junk.status_code, other_path.status_code) == (413, 400, 404)
    assert adapter.queued_updates == 0


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        ({}, {}, "the bot token is read from $TELEGRAM_BOT_TOKEN, which is not set"),
        ({"token_env": "MY_TG"}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, "read from $MY_TG, which is not set"),
        ({}, {"TELEGRAM_BOT_TOKEN": "not-a-token"}, "does not hold a bot token"),
        ({"mode": "webhook"}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, "webhook mode needs `webhook_url`"),
        (
            {"mode": "webhook", "webhook_url": "https://x/y"},
            {"TELEGRAM_BOT_TOKEN": BOT_TOKEN},
            "needs a secret token in $TELEGRAM_WEBHOOK_SECRET, which is not set",
        ),
        (
            {"mode": "webhook", "webhook_url": "https://x/y"},
            {"TELEGRAM_BOT_TOKEN": BOT_TOKEN, "TELEGRAM_WEBHOOK_SECRET": "has space"},
            "must be 1-256 characters",
        ),
        ({"webhook_url": "https://x/y"}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, '`webhook_url` is for mode = "webhook"'),
        ({"api_url": "ftp://x"}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, "is not an http(s) URL"),
        ({"token": "123:abc"}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, "options.token: unknown option"),
        ({"max_queued_updates": 0}, {"TELEGRAM_BOT_TOKEN": BOT_TOKEN}, "options.max_queued_updates: Input should be"),
    ],
)
def test_each_refused_config_says_why(options, env, message, monkeypatch):
    for name in ("TELEGRAM_BOT_TOKEN", "TELEGRAM_WEBHOOK_SECRET", "MY_TG"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(AdapterError) as refused:
        adapter_class("telegram")("tg", **options)
    assert str(refused.value).startswith("adapter 'tg' (telegram): ")
    assert message in str(refused.value)


async def test_a_token_telegram_rejects_stops_the_start(monkeypatch):
    from aiohttp import web

    async def unauthorized(request):
        return web.json_response({"ok": False, "error_code": 401, "description": "Unauthorized"}, status=401)

    server = web.Application()
    server.router.add_route("*", "/{tail:.*}", unauthorized)  # what api.telegram.org answers a revoked token
    runner = web.AppRunner(server)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", BOT_TOKEN)
    try:
        adapter = adapter_class("telegram")("tg", api_url=f"http://127.0.0.1:{port}")
        with pytest.raises(AdapterError, match=r"Telegram refused the token in \$TELEGRAM_BOT_TOKEN"):
            async with running_bot(adapter, ScriptedProvider()):
                pass
    finally:
        await runner.cleanup()


def test_telegram_is_built_from_the_config_and_names_its_extra_when_missing(monkeypatch, token):
    config = HookchatConfig.model_validate(
        {
            "adapters": {
                "console": False,
                "instances": [{"type": "telegram", "name": "tg", "options": {"poll_timeout": 10}}],
            }
        }
    )
    (adapter,) = build_adapters(config)
    assert adapter.name == "tg" and adapter.settings.poll_timeout == 10 and "sticker" in adapter.capabilities
    for module in [m for m in sys.modules if m.startswith("core.adapter.telegram")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "aiogram", None)  # as if the extra were not installed
    with pytest.raises(AdapterError, match=r"pip install 'hookchat\[telegram\]'"):
        adapter_class("telegram")
