"""The Discord adapter against dpytest (0.7.0), a fake Discord backend for discord.py someone else wrote: guild
messages and mentions, DMs, the 2,000-character split, attachments and embeds out, the typing indicator while the
model writes, receipts and recall; and every refused config.

What dpytest cannot do: it drops reply references (its messages carry no `message_reference`) and has no threads.
Replies to the bot and replies out are checked with discord.py's own model objects (`discord.Message` built from
the gateway payload Discord sends), in test_a_reply_to_the_bot_is_to_the_bot and
test_a_reply_goes_out_as_a_message_reference; a thread is a channel whose messages carry its id as
`channel_id`, which is the same path as a channel's.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import discord
import discord.ext.test as dpytest
import pytest

from core.adapter import AdapterError, adapter_class, build_adapters
from core.adapter.discord import INTENTS, DiscordAdapter, split_content
from core.app import HookChat
from core.chat import KiraMessageEvent, MessageChain, Session
from core.chat.message_elements import At, File, Image, Json, Reply, Text
from core.config import HookchatConfig
from core.plugin import BasePlugin, Priority, on
from core.testing import ScriptedProvider
from tests.adapter.conftest import GatedProvider, running_bot
from tests.security.processes import ROOT, SlowModel, write_config

pytestmark = pytest.mark.anyio


class DpytestDiscord(DiscordAdapter):
    """The adapter on dpytest's backend instead of Discord's gateway (`connect` and `disconnect` differ).

    dpytest keeps its fake members only in discord.py's member cache, which discord.py fills only with the members
    intent; the adapter itself does not ask for it."""

    intents = INTENTS | discord.Intents(members=True)

    async def connect(self) -> None:
        await self.client._async_setup_hook()  # what login() does first; dpytest's documented set-up
        dpytest.configure(self.client, members=["Ann", "Bob"])

    async def disconnect(self) -> None:
        pass  # dpytest has no connection to close


def recorder(seen: list[KiraMessageEvent]) -> type[BasePlugin]:
    class Recorder(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 1)
        async def record(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            seen.append(event)

    return Recorder


class Bot:
    """A running bot on dpytest and what its recorder plugin saw."""

    def __init__(self, adapter: DpytestDiscord, app: HookChat, seen: list[KiraMessageEvent]) -> None:
        self.adapter, self.app, self.seen = adapter, app, seen

    @property
    def config(self) -> dpytest.RunnerConfig:
        return dpytest.get_config()

    async def write(self, content: str, *, member: int = 0, channel: Any = 0, **kwargs: Any) -> KiraMessageEvent:
        count = len(self.seen)
        await dpytest.message(content, channel=channel, member=member, **kwargs)
        with anyio.fail_after(10):
            while len(self.seen) == count:
                await anyio.sleep(0.01)
        return self.seen[-1]

    async def sent(self) -> discord.Message:
        """The next message the bot sent (waits for it)."""
        with anyio.fail_after(10):
            while dpytest.sent_queue.empty():
                await anyio.sleep(0.01)
        return dpytest.get_message()


@pytest.fixture
async def discord_bot(monkeypatch: pytest.MonkeyPatch, tmp_path) -> AsyncIterator[Bot]:
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "fake.discord.token")
    monkeypatch.chdir(tmp_path)  # dpytest writes uploaded files to the working directory
    provider = ScriptedProvider()
    adapter = DpytestDiscord("dc")
    seen: list[KiraMessageEvent] = []
    async with running_bot(adapter, provider, plugins=[recorder(seen)]) as app:
        bot = Bot(adapter, app, seen)
        bot.provider = provider
        yield bot
    await dpytest.empty_queue()


async def test_a_mention_in_a_guild_channel_is_answered_and_other_chatter_is_not(discord_bot: Bot):
    me = discord_bot.adapter.client.user
    discord_bot.provider.add(f'<msg><text>Hi </text><at id="{discord_bot.config.members[0].id}"/></msg>')
    chatter = await discord_bot.write("just talking")
    mention = await discord_bot.write(f"<@{me.id}> hello there")
    answer = await discord_bot.sent()
    channel = discord_bot.config.channels[0]
    ann = discord_bot.config.members[0]
    assert not chatter.message.is_mentioned and mention.message.is_mentioned
    assert mention.message.session.sid == f"dc:gm:{channel.id}"
    assert mention.message.group.name == f"Test Guild 0 #{channel.name}"
    assert mention.message.sender.user_id == str(ann.id) and mention.message.sender.nickname == ann.display_name
    as_member = channel.guild.get_member(me.id).display_name  # the bot's nickname in that guild
    assert mention.message.chain == MessageChain([At(str(me.id), as_member), Text(" hello there")])
    assert answer.channel.id == channel.id and answer.content == f"Hi <@{ann.id}>"


async def test_a_direct_message_is_answered_in_the_dm(discord_bot: Bot):
    discord_bot.provider.add("Hello in private")
    ann = discord_bot.config.members[0]
    dm = await ann.create_dm()
    event = await discord_bot.write("psst", channel=dm)
    answer = await discord_bot.sent()
    assert event.message.session.sid == f"dc:dm:{ann.id}" and event.message.is_mentioned
    assert event.message.group is None
    assert isinstance(answer.channel, discord.DMChannel) and answer.content == "Hello in private"


async def test_long_text_is_split_at_2000_and_recall_deletes_every_part(discord_bot: Bot):
    channel = discord_bot.config.channels[0]
    session = Session("dc", "gm", str(channel.id))
    text = "line of text\n" * 200  # 2,600 characters
    receipt = await discord_bot.adapter.send(session, MessageChain([Text(text)]))
    parts = [await discord_bot.sent(), await discord_bot.sent()]
    assert receipt.ok and list(receipt.message_ids) == [str(m.id) for m in parts]
    assert all(len(m.content) <= 2000 for m in parts) and "".join(m.content for m in parts) == text
    assert parts[0].content.endswith("\n")  # cut at a line break
    await discord_bot.adapter.recall(receipt)
    for message in parts:
        with pytest.raises(discord.NotFound):
            await channel.fetch_message(message.id)


async def test_attachments_and_an_embed_go_out(discord_bot: Bot, tmp_path):
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG not really")
    session = Session("dc", "gm", str(discord_bot.config.channels[0].id))
    files = await discord_bot.adapter.send(
        session,
        MessageChain([Image(path=str(picture)), File(base64=base64.b64encode(b"a,b\n").decode(), name="data.csv")]),
    )
    with_files = await discord_bot.sent()
    card = await discord_bot.adapter.send(
        session,
        MessageChain(
            [Text("the weather"), Json({"embed": {"title": "Weather", "description": "Sunny", "color": "#3366ff"}})]
        ),
    )
    with_embed = await discord_bot.sent()
    assert files.ok and [a.filename for a in with_files.attachments] == ["cat.png", "data.csv"]
    assert (tmp_path / "dpytest_0.dat").read_bytes() == b"\x89PNG not really"  # the bytes dpytest received
    assert card.ok and with_embed.content == "the weather"
    assert with_embed.embeds[0].title == "Weather" and with_embed.embeds[0].color.value == 0x3366FF


async def test_files_and_embeds_ride_with_the_last_text_part(discord_bot: Bot, tmp_path, monkeypatch):
    # What dpytest cannot show: it reads a message's content and embeds only from the JSON payload, which
    # discord.py 2 sends as a multipart field once there are files; so this checks what reaches discord.py's HTTP.
    from core.adapter.discord import to_parts

    picture = tmp_path / "cat.png"
    picture.write_bytes(b"png")
    parts = to_parts(
        MessageChain(
            [
                Text("x" * 2500),
                Image(path=str(picture)),
                Json({"embed": {"title": "t"}}),
                Image(url="https://cdn.example/p.png"),
            ]
        )
    )
    adapter, channel = discord_bot.adapter, discord_bot.config.channels[0]
    requests = record_sends(monkeypatch, adapter)
    assert await adapter._send_part(channel, parts[0]) == 1
    await adapter._send_part(channel, parts[-1])
    (first_id, first, first_files), (last_id, last, files) = requests
    assert len(parts) == 2 and first_id == last_id == channel.id and not first_files
    assert last["content"] == "x" * 500 and [f.filename for f in files] == ["cat.png"]
    assert [e.get("title") for e in last["embeds"]] == ["t", None] and last["embeds"][1]["image"]["url"].endswith(
        "p.png"
    )


def record_sends(monkeypatch, adapter: DiscordAdapter) -> list[tuple[int, dict[str, Any], list[Any]]]:
    """What the adapter hands discord.py's HTTP client to send, as (channel id, the JSON payload, files), each
    answered as Discord answers: with the message (here only its id, 1)."""
    requests: list[tuple[int, dict[str, Any], list[Any]]] = []

    async def send_message(channel_id: int, *, params: Any) -> dict[str, Any]:
        payload = params.payload or json.loads(params.multipart[0]["value"])  # payload_json once there are files
        requests.append((channel_id, payload, list(params.files or ())))
        return {"id": "1"}

    monkeypatch.setattr(adapter.client.http, "send_message", send_message)
    return requests


async def test_attachments_in_become_media_elements(discord_bot: Bot, tmp_path):
    (tmp_path / "photo.png").write_bytes(b"png")
    ann = discord_bot.config.members[0]
    dm = await ann.create_dm()
    event = await discord_bot.write("see", channel=dm, attachments=[str(tmp_path / "photo.png")])
    (element,) = [e for e in event.message.chain if not isinstance(e, Text)]
    assert isinstance(element, File) and element.name == "photo.png" and element.url.endswith("photo.png")


async def test_the_typing_indicator_shows_while_the_model_writes(monkeypatch, tmp_path):
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "fake.discord.token")
    monkeypatch.chdir(tmp_path)
    provider = GatedProvider(["done"])
    adapter = DpytestDiscord("dc")
    typed: list[int] = []

    async def on_typing(channel: Any) -> None:
        typed.append(channel.id)

    async with running_bot(adapter, provider):
        dpytest.callbacks.set_callback(on_typing, "send_typing")
        ann = dpytest.get_config().members[0]
        dm = await ann.create_dm()
        await dpytest.message("write me something", channel=dm)
        with anyio.fail_after(10):
            await provider.called.wait()
            while not typed:  # while the model is still writing
                await anyio.sleep(0.01)
            provider.gate.set()
            while dpytest.sent_queue.empty():
                await anyio.sleep(0.01)
    assert typed[0] == dm.id and dpytest.get_message().content == "done"
    await dpytest.empty_queue()


def _payload(author: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "id": "900",
        "channel_id": "300",
        "guild_id": "100",
        "author": author,
        "content": "",
        "tts": False,
        "timestamp": "2026-01-01T00:00:00+00:00",
        "edited_timestamp": None,
        "mention_everyone": False,
        "mentions": [],
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": False,
        "type": 0,
        **fields,
    }


async def test_a_reply_to_the_bot_is_to_the_bot(monkeypatch):
    # dpytest drops message_reference: the reply is built from the gateway payload Discord sends, with discord.py's
    # own parser, and handed to the adapter's conversion.
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "fake.discord.token")
    adapter = DiscordAdapter("dc")
    bot_user = {"id": "42", "username": "hook", "discriminator": "0", "avatar": None, "bot": True}
    ann = {"id": "7", "username": "ann", "discriminator": "0", "avatar": None}
    state = adapter.client._connection
    state.user = discord.ClientUser(state=state, data=bot_user)
    state._add_guild(discord.Guild(data={"id": "100", "name": "Guild"}, state=state))
    channel = discord.PartialMessageable(state=state, id=300, guild_id=100)
    own = _payload(bot_user, id="800", content="an earlier answer")
    reply = discord.Message(
        state=state,
        channel=channel,
        data=_payload(
            ann,
            content="and then?",
            type=19,
            message_reference={"message_id": "800", "channel_id": "300"},
            referenced_message=own,
        ),
    )
    other = discord.Message(
        state=state,
        channel=channel,
        data=_payload(
            ann, id="901", content="me too", type=19, message_reference={"message_id": "555", "channel_id": "300"}
        ),
    )
    to_bot, to_someone = adapter.incoming(reply), adapter.incoming(other)
    assert to_bot.chain == MessageChain([Reply("800"), Text("and then?")]) and to_bot.is_mentioned
    assert to_someone.chain[0] == Reply("555") and not to_someone.is_mentioned
    assert to_bot.session.sid == "dc:gm:300"


async def test_a_reply_goes_out_as_a_message_reference(monkeypatch):
    # What dpytest cannot show: the reference is part of what the adapter hands discord.py to send.
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "fake.discord.token")
    adapter = DiscordAdapter("dc")
    channel = discord.PartialMessageable(state=adapter.client._connection, id=300)
    from core.adapter.discord._convert import to_parts

    requests = record_sends(monkeypatch, adapter)
    (part,) = to_parts(MessageChain([Reply("800"), Text("sure")]))
    await adapter._send_part(channel, part)
    ((channel_id, payload, _),) = requests
    assert channel_id == 300 and payload["content"] == "sure"
    reference = payload["message_reference"]
    assert reference == {"type": 0, "message_id": 800, "channel_id": 300, "fail_if_not_exists": False}  # 0: a reply
    assert payload["allowed_mentions"] == {"parse": ["users"], "replied_user": True}  # the client's: no @everyone


def test_split_content_cuts_at_line_breaks_then_spaces():
    assert split_content("a" * 4500) == ["a" * 2000, "a" * 2000, "a" * 500]
    words = split_content("word " * 500)
    assert all(len(p) <= 2000 for p in words) and "".join(words) == "word " * 500 and words[0].endswith(" ")


@pytest.mark.parametrize(
    ("options", "env", "message"),
    [
        ({}, {}, "the bot token is read from $DISCORD_BOT_TOKEN, which is not set"),
        ({"token_env": "MY_DC"}, {"DISCORD_BOT_TOKEN": "t"}, "read from $MY_DC, which is not set"),
        ({"token": "abc"}, {"DISCORD_BOT_TOKEN": "t"}, "options.token: unknown option"),
        ({"max_queued_messages": 0}, {"DISCORD_BOT_TOKEN": "t"}, "options.max_queued_messages: Input should be"),
    ],
)
def test_each_refused_config_says_why(options, env, message, monkeypatch):
    for name in ("DISCORD_BOT_TOKEN", "MY_DC"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(AdapterError) as refused:
        adapter_class("discord")("dc", **options)
    assert str(refused.value).startswith("adapter 'dc' (discord): ") and message in str(refused.value)


def test_discord_is_built_from_the_config_and_names_its_extra_when_missing(monkeypatch):
    monkeypatch.setenv("DISCORD_BOT_TOKEN", "t")
    config = HookchatConfig.model_validate(
        {"adapters": {"console": False, "instances": [{"type": "discord", "options": {"typing": False}}]}}
    )
    (adapter,) = build_adapters(config)
    assert adapter.name == "discord" and not adapter.settings.typing and "embed" in adapter.capabilities
    assert adapter.client.intents.message_content and adapter.client.intents.dm_messages
    for module in [m for m in sys.modules if m.startswith("core.adapter.discord")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "discord", None)
    with pytest.raises(AdapterError, match=r"pip install 'hookchat\[discord\]'"):
        adapter_class("discord")


async def test_the_embed_tag_is_offered_on_discord_and_sends_an_embed(discord_bot: Bot):
    discord_bot.provider.add('<msg><embed title="Weather" color="#3366ff">Sunny all day</embed></msg>')
    ann = discord_bot.config.members[0]
    await discord_bot.write("weather?", channel=await ann.create_dm())
    sent = await discord_bot.sent()
    (request,) = discord_bot.provider.requests
    assert "<embed" in request.render_system() and "<poke" not in request.render_system()
    assert sent.embeds[0].title == "Weather" and sent.embeds[0].description == "Sunny all day"
    assert sent.embeds[0].color.value == 0x3366FF


# `hookchat run` itself, in its own process, with the instance block of docs/adapters.md: only `connect` (Discord's
# gateway) is dpytest's backend; the config, the model over HTTP, the adapter's start, the replies and the stop by
# SIGTERM are the command's own. Ann mentions the bot in a channel and writes to it in private; each reply is printed.
RUN_ON_DPYTEST = """
import asyncio, os, signal, sys
import discord
import discord.ext.test as dpytest
from discord.ext.test import callbacks
from core import cli
from core.adapter.discord import INTENTS, DiscordAdapter

async def connect(self):
    await self.client._async_setup_hook()
    dpytest.configure(self.client, members=["Ann"])
    replies = []

    async def on_send(message):
        replies.append(message)
        where = "dm" if isinstance(message.channel, discord.DMChannel) else "channel"
        print(f"discord {where}> {message.content}", file=sys.stderr, flush=True)
        if len(replies) == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    async def ann():
        await dpytest.message(f"<@{self.client.user.id}> hello from the channel", channel=0, member=0)
        dm = await dpytest.get_config().members[0].create_dm()
        await dpytest.message("hello in private", channel=dm, member=0)

    callbacks.set_callback(on_send, "send_message")
    self._ann = asyncio.get_running_loop().create_task(ann())

async def disconnect(self):
    pass

DiscordAdapter.intents = INTENTS | discord.Intents(members=True)  # dpytest keeps its members in the member cache
DiscordAdapter.connect, DiscordAdapter.disconnect = connect, disconnect
sys.exit(cli.main(["run", "-c", sys.argv[1]]))
"""


def test_hookchat_run_with_the_documented_instance_answers_on_dpytest_and_stops_on_sigterm(tmp_path):
    docs = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8").split("\n## Discord\n", 1)[1]
    (instance,) = re.findall(r"```toml\n(.*?)```", docs.split("\n## ", 1)[0], re.S)
    model = SlowModel(0)
    try:
        config = write_config(tmp_path, model.url, extra="[adapters]\nconsole = false\n" + instance)
        env = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "HOME": str(tmp_path),
            "DISCORD_BOT_TOKEN": "doc.discord.token",
        }
        run = subprocess.run(
            [sys.executable, "-c", RUN_ON_DPYTEST, str(config)],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        model.close()
    said = run.stderr
    assert run.returncode == 0, said
    assert re.search(r"^discord channel> .*answer: .*hello from the channel", said, re.M), said
    assert re.search(r"^discord dm> .*answer: .*hello in private", said, re.M), said
    assert "Traceback" not in said, said
