"""The Telegram adapter against aiogram-test-framework (PyPI), which feeds updates through aiogram's dispatcher and
captures every Bot API request the bot makes: what telegram-test-api cannot do (it has no files and no groups).
Groups (mentions by @username, replies to the bot, privacy-mode style traffic that is not to the bot), media in
(photo, voice, document, sticker) and out (sendPhoto, sendVoice, sendDocument, sendSticker, a quoted reply).

What this peer cannot check: its getFile answers without a file, so a download is not possible here; media in are
checked as elements naming the file (the download path is what `download_media = false` also gives).
"""

from __future__ import annotations

import base64
import itertools
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import anyio
import pytest
from aiogram.types import Chat, Document, Message, MessageEntity, PhotoSize, Update, User, Voice
from aiogram.types import Sticker as TgSticker
from aiogram_test_framework import RequestType
from aiogram_test_framework import TestClient as AiogramTestClient

from core.adapter.telegram import TelegramAdapter, split_text, utf16_len
from core.app import HookChat
from core.chat import KiraMessageEvent, MessageChain, Session
from core.chat.message_elements import At, File, Image, Record, Reply, Sticker, Text
from core.plugin import BasePlugin, Priority, on
from core.testing import ScriptedProvider
from tests.adapter.conftest import GatedProvider, running_bot

pytestmark = pytest.mark.anyio

BOT = User(id=4242, is_bot=True, first_name="Hook", username="hook_bot")
ANN = User(id=7, is_bot=False, first_name="Ann", username="ann")
GROUP = Chat(id=-1001, type="supergroup", title="Friends")
_ids = itertools.count(100)


def recorder(seen: list[KiraMessageEvent]) -> type[BasePlugin]:
    class Recorder(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 1)
        async def record(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            seen.append(event)

    return Recorder


class Offline:
    """A bot (a real `HookChat`) whose Telegram adapter is attached to aiogram-test-framework's client."""

    def __init__(
        self, client: AiogramTestClient, adapter: TelegramAdapter, app: HookChat, seen: list[KiraMessageEvent]
    ) -> None:
        self.client, self.adapter, self.app, self.seen = client, adapter, app, seen

    async def deliver(self, chat: Chat = GROUP, **fields: Any) -> KiraMessageEvent:
        """Feed one message update through the dispatcher and wait for its `im_message` event."""
        count = len(self.seen)
        message = Message(
            message_id=next(_ids), date=datetime.now(), chat=chat, from_user=fields.pop("author", ANN), **fields
        )
        await self.client.dispatcher.feed_update(self.client.bot, Update(update_id=next(_ids), message=message))
        with anyio.fail_after(10):
            while len(self.seen) == count:
                await anyio.sleep(0.01)
        return self.seen[-1]

    def requests(self, kind: RequestType) -> list[dict[str, Any]]:
        """The parameters of every captured request of `kind`."""
        return [r.params for r in self.client.capture.get_by_type(kind)]


@pytest.fixture
async def offline(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Offline]:
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "4242:offline-token")
    adapter = TelegramAdapter("tg", download_media=False)
    client = await AiogramTestClient.create(
        bot_token="4242:offline-token",
        bot_id=BOT.id,
        bot_username=BOT.username,
        bot_first_name=BOT.first_name,
        setup_dispatcher_func=adapter.attach,
    )
    seen: list[KiraMessageEvent] = []
    async with running_bot(adapter, ScriptedProvider(), plugins=[recorder(seen)]) as app:
        yield Offline(client, adapter, app, seen)
    await client.close()


async def test_in_a_group_a_mention_of_the_bot_is_to_the_bot_and_other_messages_are_not(offline: Offline):
    mention = await offline.deliver(
        text="hey @hook_bot and @bob",
        entities=[
            MessageEntity(type="mention", offset=4, length=9),
            MessageEntity(type="mention", offset=18, length=4),
        ],
    )
    chatter = await offline.deliver(
        text="just chatting with @bob", entities=[MessageEntity(type="mention", offset=19, length=4)]
    )
    command = await offline.deliver(
        text="/help@hook_bot", entities=[MessageEntity(type="bot_command", offset=0, length=14)]
    )
    assert mention.message.session.sid == "tg:gm:-1001" and mention.message.group.name == "Friends"
    assert mention.message.chain == MessageChain([Text("hey "), At("4242", "hook_bot"), Text(" and "), At("@bob")])
    assert mention.message.is_mentioned and not chatter.message.is_mentioned and command.message.is_mentioned


async def test_a_reply_to_the_bot_is_to_the_bot_and_quotes_the_message(offline: Offline):
    own = Message(message_id=55, date=datetime.now(), chat=GROUP, from_user=BOT, text="earlier answer")
    other = Message(message_id=56, date=datetime.now(), chat=GROUP, from_user=ANN, text="someone else")
    to_bot = await offline.deliver(text="and then?", reply_to_message=own)
    to_ann = await offline.deliver(text="me too", reply_to_message=other)
    assert to_bot.message.is_mentioned and to_bot.message.chain == MessageChain([Reply("55"), Text("and then?")])
    assert not to_ann.message.is_mentioned


async def test_offsets_count_utf16_units_as_telegram_does(offline: Offline):
    # "😀" is two UTF-16 units: the mention starts at 3, not 2
    event = await offline.deliver(text="😀 @hook_bot hi", entities=[MessageEntity(type="mention", offset=3, length=9)])
    assert event.message.chain == MessageChain([Text("😀 "), At("4242", "hook_bot"), Text(" hi")])
    assert event.message.is_mentioned


async def test_the_bots_own_messages_and_edits_are_not_delivered(offline: Offline):
    own = Message(message_id=1, date=datetime.now(), chat=GROUP, from_user=BOT, text="echo")
    await offline.client.dispatcher.feed_update(offline.client.bot, Update(update_id=1, message=own))
    edited = Message(message_id=2, date=datetime.now(), chat=GROUP, from_user=ANN, text="fixed typo")
    await offline.client.dispatcher.feed_update(offline.client.bot, Update(update_id=2, edited_message=edited))
    after = await offline.deliver(text="next")
    assert [e.message.chain.plain_text for e in offline.seen] == ["next"] and after.message.message_id


async def test_photos_voice_documents_and_stickers_arrive_as_elements(offline: Offline):
    photo = await offline.deliver(
        chat=Chat(id=7, type="private"),
        caption="look @hook_bot",
        caption_entities=[MessageEntity(type="mention", offset=5, length=9)],
        photo=[
            PhotoSize(file_id="small", file_unique_id="s", width=90, height=90),
            PhotoSize(file_id="big", file_unique_id="b", width=900, height=900),
        ],
    )
    voice = await offline.deliver(voice=Voice(file_id="v1", file_unique_id="v", duration=3, mime_type="audio/ogg"))
    document = await offline.deliver(
        document=Document(file_id="d1", file_unique_id="d", file_name="notes.pdf", mime_type="application/pdf")
    )
    sticker = await offline.deliver(
        sticker=TgSticker(
            file_id="st1",
            file_unique_id="st",
            type="regular",
            width=512,
            height=512,
            is_animated=False,
            is_video=False,
            emoji="👍",
        )
    )
    assert photo.message.chain == MessageChain(
        [Image(name="big", mime="image/jpeg"), Text("look "), At("4242", "hook_bot")]
    )
    assert photo.message.session.sid == "tg:dm:7" and photo.message.is_mentioned
    assert voice.message.chain == MessageChain([Record(name="v1", mime="audio/ogg")])
    assert document.message.chain == MessageChain([File(name="notes.pdf", mime="application/pdf")])
    assert sticker.message.chain == MessageChain([Sticker(name="👍", mime="image/webp")])


async def test_media_go_out_with_their_own_methods_and_a_reply_quotes_the_first(offline: Offline, tmp_path):
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG fake")
    chain = MessageChain(
        [
            Reply("55"),
            Text("here you go"),
            Image(path=str(picture)),
            Record(base64=base64.b64encode(b"OggS").decode()),
            File(url="https://example.org/a.pdf"),
            Sticker(url="https://example.org/s.webp"),
            Text("that's all"),
        ]
    )
    receipt = await offline.adapter.send(Session("tg", "gm", "-1001"), chain)
    texts = offline.requests(RequestType.SEND_MESSAGE)
    photos, voices = offline.requests(RequestType.SEND_PHOTO), offline.requests(RequestType.SEND_VOICE)
    documents, stickers = offline.requests(RequestType.SEND_DOCUMENT), offline.requests(RequestType.SEND_STICKER)
    assert receipt.ok and len(receipt.message_ids) == 6
    assert [t["text"] for t in texts] == ["here you go", "that's all"]
    assert texts[0]["reply_parameters"]["message_id"] == 55 and "reply_parameters" not in texts[1]
    assert photos[0]["chat_id"] == -1001 and photos[0]["photo"].path == str(picture)
    assert voices[0]["voice"].data == b"OggS"
    assert documents[0]["document"] == "https://example.org/a.pdf" and stickers[0]["sticker"].endswith("s.webp")


async def test_recall_deletes_every_message_of_a_send(offline: Offline):
    receipt = await offline.adapter.send(Session("tg", "dm", "7"), MessageChain([Text("x" * 5000)]))
    await offline.adapter.recall(receipt)
    deleted = offline.requests(RequestType.DELETE_MESSAGE)
    assert len(receipt.message_ids) == 2
    assert [(d["chat_id"], str(d["message_id"])) for d in deleted] == [(7, i) for i in receipt.message_ids]


async def test_typing_shows_while_the_model_writes(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "4242:offline-token")
    adapter = TelegramAdapter("tg", download_media=False)
    client = await AiogramTestClient.create(
        bot_token="4242:offline-token",
        bot_id=BOT.id,
        bot_username=BOT.username,
        bot_first_name=BOT.first_name,
        setup_dispatcher_func=adapter.attach,
    )
    provider = GatedProvider(["done"])
    async with running_bot(adapter, provider):
        message = Message(
            message_id=1, date=datetime.now(), chat=Chat(id=7, type="private"), from_user=ANN, text="write something"
        )
        await client.dispatcher.feed_update(client.bot, Update(update_id=1, message=message))
        with anyio.fail_after(10):
            await provider.called.wait()
            while not client.capture.get_by_type(RequestType.SEND_CHAT_ACTION):  # while the model writes
                await anyio.sleep(0.01)
            assert not client.capture.get_sent_messages()
            provider.gate.set()
            while not client.capture.get_sent_messages():
                await anyio.sleep(0.01)
    (action,) = [r.params for r in client.capture.get_by_type(RequestType.SEND_CHAT_ACTION)]
    assert action == {"chat_id": 7, "action": "typing"}
    await client.close()


async def test_telegram_is_not_offered_the_embed_tag(offline: Offline):
    offline.app.provider.add("plain")  # type: ignore[attr-defined] - the ScriptedProvider this test set up
    await offline.deliver(chat=Chat(id=7, type="private"), text="hi")
    with anyio.fail_after(10):
        while not offline.client.capture.get_sent_messages():
            await anyio.sleep(0.01)
    system = offline.app.provider.requests[0].render_system()  # type: ignore[attr-defined] - the ScriptedProvider records requests
    assert "<img" in system and "<embed" not in system


def test_a_received_file_is_kept_under_a_name_no_sender_chooses(monkeypatch, tmp_path):
    from core.utils.path_utils import set_data_path

    monkeypatch.setenv("TELEGRAM_BOT_TOKEN", "4242:offline-token")
    adapter = TelegramAdapter("tg")
    set_data_path(tmp_path)
    try:
        hostile = adapter.download_path("../../x", "../../../etc/cron.d/evil.sh/", "text/plain")
        odd = adapter.download_path("id", "a.tar.\x00gz", "image/png")
        plain = adapter.download_path("AgADBQ", "notes.pdf", "application/pdf")
    finally:
        set_data_path(None)
    assert hostile.parent == plain.parent == odd.parent == tmp_path / "telegram" / "tg" and odd.name == "id.png"
    assert hostile.name == "______x.sh" and plain.name == "AgADBQ.pdf"


def test_the_split_counts_utf16_units_as_telegram_does():
    # "😀" is two UTF-16 units: 2,048 of them fill a message (4,096 units) though they are 2,048 characters
    assert (utf16_len("a😀é"), utf16_len("")) == (4, 0)
    pieces = split_text([("😀" * 2049, None)])
    assert [len(text) for text, _ in pieces] == [2048, 1]
