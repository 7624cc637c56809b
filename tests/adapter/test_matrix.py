"""The Matrix adapter against a real Synapse homeserver (started once for the module), with a person driven by
matrix-nio: a direct chat, a room where only mentions and replies to the bot are answered, media both ways through
the homeserver, invites, a refused encrypted room, recall, a restart of hookchat (nothing answered twice, nothing
written meanwhile lost) and a restart of Synapse in the middle of a turn (the reply arrives once)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import io
import re
import sys
import tempfile
import textwrap
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from PIL import Image as PILImage

from core.adapter import AdapterError, build_adapters
from core.adapter.matrix import ENCRYPTION_REFUSAL, MatrixAdapter
from core.app import HookChat
from core.chat import KiraMessageEvent, MessageChain, Session
from core.chat.message_elements import At, Image, Reply, Text
from core.config import HookchatConfig, load_config
from core.plugin import BasePlugin, Priority, on
from core.testing import BUILTIN_PLUGINS_DIR, ScriptedProvider
from tests.adapter.conftest import GatedProvider

pytest.importorskip("synapse", reason="the Matrix tests need Synapse: pip install -e '.[test]'")

from tests.adapter.synapse import MatrixUser, Synapse

pytestmark = pytest.mark.anyio
BOT_PASSWORD, ANN_PASSWORD = "bot-pass-1", "ann-pass-1"


@pytest.fixture(scope="module")
def synapse() -> Iterator[Synapse]:
    with tempfile.TemporaryDirectory(prefix="hookchat-synapse-") as home:
        server = Synapse(Path(home))
        server.start()
        try:
            with concurrent.futures.ThreadPoolExecutor(3) as pool:  # each registration is its own process
                list(
                    pool.map(
                        lambda u: server.register(*u),
                        [("bot", BOT_PASSWORD), ("ann", ANN_PASSWORD), ("cat", "cat-pass-1")],
                    )
                )
            yield server
        finally:
            server.stop()


BOT, ANN, CAT = "@bot:localhost", "@ann:localhost", "@cat:localhost"


@pytest.fixture
async def ann(synapse: Synapse) -> AsyncIterator[MatrixUser]:
    async with MatrixUser(synapse.url, ANN, ANN_PASSWORD) as user:
        yield user


@pytest.fixture(autouse=True)
def bot_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOOKCHAT_TEST_MATRIX_PASSWORD", BOT_PASSWORD)


def recorder() -> tuple[type[BasePlugin], asyncio.Queue[KiraMessageEvent]]:
    """A plugin class recording every `im_message` event (before the chat plugin), and its queue."""
    inbox: asyncio.Queue[KiraMessageEvent] = asyncio.Queue()

    class Recorder(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 1)
        async def record(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            inbox.put_nowait(event)

    return Recorder, inbox


def _adapter(synapse: Synapse, **options: Any) -> MatrixAdapter:
    return MatrixAdapter(
        "mx",
        homeserver=synapse.url,
        user_id=BOT,
        password_env="HOOKCHAT_TEST_MATRIX_PASSWORD",
        sync_timeout=1,
        reconnect_initial=0.2,
        reconnect_max=1,
        **options,
    )


@asynccontextmanager
async def bot(
    adapter: MatrixAdapter, provider: ScriptedProvider, data_dir: str | None = None, plugins: tuple[type, ...] = ()
) -> AsyncIterator[HookChat]:
    """A real bot (chat plugin flushing every message, built-in tags) around `adapter`, synced once."""
    with tempfile.TemporaryDirectory(prefix="hookchat-matrix-") as fresh:
        config = HookchatConfig.model_validate(
            {
                "data": {"dir": data_dir or fresh},
                "adapters": {"console": False},
                "plugins": {"dirs": [], "config": {"chat": {"flush_messages": 1}}},
            }
        )
        async with HookChat(
            config,
            provider=provider,
            adapters=[adapter],
            entry_points=False,
            plugins=[BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags", *plugins],
        ) as app:
            await asyncio.wait_for(adapter.wait_until(lambda s: s.syncs >= 1 and s.queued_events == 0), 30)
            yield app


def _bot_messages(ann: MatrixUser, room_id: str) -> list[dict]:
    return [e for e in ann.from_user(room_id, BOT) if e["content"].get("msgtype") != "m.notice"]


async def _room_with_bot(ann: MatrixUser, adapter: MatrixAdapter, *, direct: bool) -> str:
    room_id = await ann.create_room([BOT] if direct else [BOT, CAT], direct=direct)
    await ann.wait_joined(room_id, BOT)
    await asyncio.wait_for(adapter.wait_until(lambda s: room_id in adapter.rooms), 20)
    return room_id


async def test_a_direct_chat_is_answered_and_the_receipt_is_the_event_id(synapse, ann):
    adapter = _adapter(synapse)
    Recorder, inbox = recorder()
    async with bot(adapter, ScriptedProvider(["Hello Ann!"]), plugins=(Recorder,)):
        room_id = await _room_with_bot(ann, adapter, direct=True)
        asked = await ann.say(room_id, "hi bot")
        event = await asyncio.wait_for(inbox.get(), 20)
        message = event.message
        assert message.session.sid == f"mx:dm:{ANN}" and message.message_id == asked and message.is_mentioned
        assert message.group is None and message.sender.user_id == ANN and list(message.chain) == [Text("hi bot")]
        ((_, reply),) = await ann.wait_for(
            lambda r, e: r == room_id and e.get("sender") == BOT and e["type"] == "m.room.message"
        )
        assert reply["content"]["body"] == "Hello Ann!"
        # a push to the same person goes to the same room; its receipt names the event, and recall redacts it
        receipt = await adapter.send(message.session, MessageChain([Text("one more thing")]))
        assert receipt.ok and receipt.message_ids == (receipt.message_id,)
        ((_, pushed),) = await ann.wait_for(lambda r, e: e.get("event_id") == receipt.message_id)
        assert pushed["content"]["body"] == "one more thing"
        await adapter.recall(receipt)
        await ann.wait_for(lambda r, e: e["type"] == "m.room.redaction" and e.get("redacts") == receipt.message_id)


async def test_in_a_room_only_mentions_and_replies_to_the_bot_are_to_it(synapse, ann):
    adapter = _adapter(synapse)
    Recorder, inbox = recorder()
    async with bot(adapter, ScriptedProvider(["first answer", "second answer", "third answer"]), plugins=(Recorder,)):
        room_id = await _room_with_bot(ann, adapter, direct=False)
        await ann.say(room_id, "talking to cat, not the bot", **{"m.mentions": {"user_ids": [CAT]}})
        quiet = (await asyncio.wait_for(inbox.get(), 20)).message
        assert quiet.session.sid == f"mx:gm:{room_id}" and quiet.group.group_id == room_id
        assert not quiet.is_mentioned
        await ann.say(room_id, "bot: what is 2+2?", **{"m.mentions": {"user_ids": [BOT]}})
        assert (await asyncio.wait_for(inbox.get(), 20)).message.is_mentioned
        ((_, answer),) = await ann.wait_for(
            lambda r, e: r == room_id and e.get("sender") == BOT and e["type"] == "m.room.message"
        )
        assert answer["content"]["body"] == "first answer"
        # an older client: no m.mentions, the bot's name in the text
        await ann.say(room_id, "hey Bot, are you there?")
        assert (await asyncio.wait_for(inbox.get(), 20)).message.is_mentioned
        await ann.wait_for(
            lambda r, e: r == room_id and e.get("sender") == BOT and e["content"].get("body") == "second answer"
        )
        # a reply to the bot's message, with the quoted fallback older clients add
        replied = await ann.say(
            room_id,
            f"> <{BOT}> first answer\n\nwhy?",
            **{"m.relates_to": {"m.in_reply_to": {"event_id": answer["event_id"]}}},
        )
        message = (await asyncio.wait_for(inbox.get(), 20)).message
        assert message.is_mentioned and list(message.chain) == [Reply(answer["event_id"]), Text("why?")]
        ((_, third),) = await ann.wait_for(
            lambda r, e: e.get("sender") == BOT and e["content"].get("body") == "third answer"
        )
        # the bot can reply and mention too: m.relates_to and m.mentions with a pill
        receipt = await adapter.send(message.session, MessageChain([Reply(replied), At(ANN, "Ann"), Text(" because")]))
        ((_, sent),) = await ann.wait_for(lambda r, e: e.get("event_id") == receipt.message_id)
        content = sent["content"]
        assert content["m.relates_to"] == {"m.in_reply_to": {"event_id": replied}}
        assert content["m.mentions"] == {"user_ids": [ANN]} and content["body"].endswith(" because")
        assert f'href="https://matrix.to/#/{ANN}"' in content["formatted_body"]
    assert len(_bot_messages(ann, room_id)) == 4  # three answers and the reply; the first message not answered


def _png(colour: str) -> bytes:
    out = io.BytesIO()
    PILImage.new("RGB", (8, 8), colour).save(out, "PNG")
    return out.getvalue()


async def test_media_goes_both_ways_through_the_homeserver(synapse, ann, tmp_path):
    adapter = _adapter(synapse, max_download_bytes=100_000)
    Recorder, inbox = recorder()
    async with bot(adapter, ScriptedProvider(["nice picture"] * 3), plugins=(Recorder,)):
        room_id = await _room_with_bot(ann, adapter, direct=True)
        picture = _png("red")
        mxc = await ann.upload(picture, "image/png", "red.png")
        await ann.send(
            room_id,
            {
                "msgtype": "m.image",
                "body": "red.png",
                "url": mxc,
                "info": {"mimetype": "image/png", "size": len(picture)},
            },
        )
        (image,) = (await asyncio.wait_for(inbox.get(), 20)).message.chain
        assert isinstance(image, Image) and image.name == "red.png" and image.mime == "image/png"
        assert await image.get_bytes() == picture  # downloaded through the homeserver's media API
        assert Path(image.path).is_relative_to(Path(adapter._media_dir))
        # over max_download_bytes: not downloaded, the mxc:// URI kept
        big = await ann.upload(b"x" * 200_000, "application/octet-stream", "big.bin")
        await ann.send(room_id, {"msgtype": "m.file", "body": "big.bin", "url": big, "info": {"size": 200_000}})
        (file,) = (await asyncio.wait_for(inbox.get(), 20)).message.chain
        assert file.url == big and file.path is None
        # out: a local picture is uploaded and sent as m.image
        blue = tmp_path / "blue.png"
        blue.write_bytes(_png("blue"))
        receipt = await adapter.send(Session("mx", "dm", ANN), MessageChain([Text("look:"), Image(path=str(blue))]))
        assert receipt.ok and len(receipt.message_ids) == 2
        ((_, sent),) = await ann.wait_for(lambda r, e: e.get("event_id") == receipt.message_ids[1])
        assert sent["content"]["msgtype"] == "m.image" and sent["content"]["info"]["mimetype"] == "image/png"
        assert await ann.download(sent["content"]["url"]) == blue.read_bytes()


async def test_an_encrypted_room_is_refused_with_a_notice(synapse, ann):
    adapter = _adapter(synapse)
    async with bot(adapter, ScriptedProvider()):
        room_id = await ann.create_room([BOT], encrypted=True)
        await ann.wait_for(
            lambda r, e: r == room_id and e.get("sender") == BOT and e["content"].get("body") == ENCRYPTION_REFUSAL
        )
        await ann.wait_for(
            lambda r, e: (
                r == room_id
                and e["type"] == "m.room.member"
                and e["state_key"] == BOT
                and e["content"]["membership"] == "leave"
            )
        )
        assert adapter.stats().refused_rooms == 1


async def test_with_auto_join_off_an_invite_is_left_alone(synapse, ann):
    adapter = _adapter(synapse, auto_join=False)
    async with bot(adapter, ScriptedProvider()):
        room_id = await ann.create_room([BOT])
        await asyncio.wait_for(adapter.wait_until(lambda s: s.invites_left == 1), 20)
        assert room_id not in adapter.rooms
    members = await ann.client.joined_members(room_id)
    assert [m.user_id for m in members.members] == [ANN]


async def test_a_restart_of_hookchat_answers_what_came_meanwhile_and_nothing_twice(synapse, ann, tmp_path):
    data = str(tmp_path / "data")
    provider = ScriptedProvider(["answer one", "answer two"])
    adapter = _adapter(synapse)
    async with bot(adapter, provider, data):
        room_id = await _room_with_bot(ann, adapter, direct=True)
        await ann.say(room_id, "question one")
        await ann.wait_for(lambda r, e: e.get("sender") == BOT and e["content"].get("body") == "answer one")
    await ann.say(room_id, "question two, while the bot is down")
    again = _adapter(synapse)
    async with bot(again, provider, data):
        await ann.wait_for(lambda r, e: e.get("sender") == BOT and e["content"].get("body") == "answer two")
        await asyncio.wait_for(again.wait_until(lambda s: s.syncs >= 2), 20)  # time to answer anything else
    asked = [r.user_prompt for r in provider.requests]
    assert len(asked) == 2 and "question two" in asked[1] and "question one" not in asked[1]
    assert [e["content"]["body"] for e in _bot_messages(ann, room_id)] == ["answer one", "answer two"]


async def test_a_synapse_restart_in_the_middle_of_a_turn_delivers_the_reply_once(synapse, ann):
    provider = GatedProvider(["after the restart", "and still here"])
    adapter = _adapter(synapse)
    async with bot(adapter, provider):
        room_id = await _room_with_bot(ann, adapter, direct=True)
        await ann.say(room_id, "a slow question")
        await asyncio.wait_for(provider.called.wait(), 20)
        await asyncio.to_thread(synapse.stop)
        provider.gate.set()  # the reply is sent while the homeserver is down: it waits and is retried
        await asyncio.wait_for(adapter.wait_until(lambda s: not s.connected), 20)
        await asyncio.to_thread(synapse.start)
        await ann.wait_for(
            lambda r, e: e.get("sender") == BOT and e["content"].get("body") == "after the restart", timeout=40
        )
        await ann.say(room_id, "still there?")  # the sync came back too
        await ann.wait_for(lambda r, e: e.get("sender") == BOT and e["content"].get("body") == "and still here")
    assert [e["content"]["body"] for e in _bot_messages(ann, room_id)] == ["after the restart", "and still here"]


async def test_refusals_at_login_name_the_problem(synapse, monkeypatch):
    monkeypatch.setenv("HOOKCHAT_TEST_MATRIX_PASSWORD", "wrong")
    with pytest.raises(AdapterError, match=r"refused the password login of @bot:localhost: .*check password_env"):
        async with bot(_adapter(synapse), ScriptedProvider()):
            pass
    monkeypatch.setenv("HOOKCHAT_TEST_MATRIX_TOKEN", "not-a-token")
    token_adapter = MatrixAdapter(
        "mx", homeserver=synapse.url, user_id=BOT, access_token_env="HOOKCHAT_TEST_MATRIX_TOKEN"
    )
    with pytest.raises(AdapterError, match="refused the access token: .*check access_token_env"):
        async with bot(token_adapter, ScriptedProvider()):
            pass


async def test_an_access_token_of_another_account_is_refused(synapse, ann, monkeypatch):
    monkeypatch.setenv("HOOKCHAT_TEST_MATRIX_TOKEN", ann.client.access_token)
    adapter = MatrixAdapter("mx", homeserver=synapse.url, user_id=BOT, access_token_env="HOOKCHAT_TEST_MATRIX_TOKEN")
    with pytest.raises(AdapterError, match=f"the access token belongs to {ANN}, not {BOT}"):
        async with bot(adapter, ScriptedProvider()):
            pass


def test_the_setup_example_of_the_docs_builds_its_adapter(tmp_path, monkeypatch):
    section = (Path(__file__).resolve().parents[2] / "docs" / "adapters.md").read_text(encoding="utf-8")
    section = section.split("\n## Matrix\n", 1)[1]
    (example,) = re.findall(r"```toml\n(.*?)```", section, re.S)
    (tmp_path / "hookchat.toml").write_text(textwrap.dedent(example), encoding="utf-8")
    monkeypatch.setenv("MATRIX_TOKEN", "syt_example")
    console, adapter = build_adapters(load_config(tmp_path / "hookchat.toml", env={}))
    assert isinstance(adapter, MatrixAdapter) and adapter.settings.user_id == "@hookbot:example.org"
    monkeypatch.delenv("MATRIX_TOKEN")
    with pytest.raises(AdapterError, match="access_token_env names MATRIX_TOKEN, which is not set"):
        build_adapters(load_config(tmp_path / "hookchat.toml", env={}))


def test_without_matrix_nio_the_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "nio", None)  # as if it were not installed
    with pytest.raises(AdapterError, match=r"needs matrix-nio.*pip install 'hookchat\[matrix\]'"):
        MatrixAdapter("mx", homeserver="https://x", user_id="@b:x", password_env="HOOKCHAT_TEST_MATRIX_PASSWORD")


def test_matrix_is_a_built_in_type_built_from_the_config(monkeypatch):
    monkeypatch.setenv("MATRIX_TOKEN", "t")
    config = HookchatConfig.model_validate(
        {
            "adapters": {
                "console": False,
                "instances": [
                    {
                        "type": "matrix",
                        "options": {
                            "homeserver": "https://matrix.example.org/",
                            "user_id": "@bot:example.org",
                            "access_token_env": "MATRIX_TOKEN",
                        },
                    }
                ],
            }
        }
    )
    (adapter,) = build_adapters(config)
    assert isinstance(adapter, MatrixAdapter) and adapter.name == "matrix"
    assert adapter.settings.homeserver == "https://matrix.example.org"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "options.homeserver: required"),
        (
            {"homeserver": "matrix.example.org", "user_id": "@b:x", "password_env": "P"},
            "options.homeserver: 'matrix.example.org' is not an http:// or https:// URL",
        ),
        (
            {"homeserver": "https://x", "user_id": "bot", "password_env": "P"},
            "options.user_id: not a Matrix user id like @bot:example.org",
        ),
        ({"homeserver": "https://x", "user_id": "@b:x"}, "set exactly one of `access_token_env` or `password_env`"),
        (
            {"homeserver": "https://x", "user_id": "@b:x", "password_env": "P", "access_token_env": "T"},
            "set exactly one of `access_token_env` or `password_env`",
        ),
        (
            {"homeserver": "https://x", "user_id": "@b:x", "password_env": "P", "password": "p"},
            "options.password: unknown option",
        ),
        (
            {"homeserver": "https://x", "user_id": "@b:x", "password_env": "HOOKCHAT_TEST_UNSET"},
            "password_env names HOOKCHAT_TEST_UNSET, which is not set",
        ),
        (
            {"homeserver": "https://x", "user_id": "@b:x", "password_env": "P", "max_queued_events": 0},
            "options.max_queued_events: Input should be greater than 0",
        ),
    ],
)
def test_bad_options_are_refused_when_the_adapter_is_built(options, message, monkeypatch):
    monkeypatch.setenv("P", "secret")
    monkeypatch.setenv("T", "secret")
    monkeypatch.delenv("HOOKCHAT_TEST_UNSET", raising=False)
    with pytest.raises(AdapterError) as refused:
        MatrixAdapter("mx", **options)
    assert str(refused.value).startswith("adapter 'mx' (matrix): ")
    assert message in str(refused.value)
