"""One test per known fault of the framework seed 003 describes (the list at the end of shared/DESIGN.md).

Each test fails if hookchat repeats that fault.
"""

import asyncio
import logging
import threading

import pytest

from core.chat.message_elements import File, Image, Text
from core.plugin import BasePlugin, on, register
from core.provider import LLMProvider, LLMRequest, LLMResponse, ToolCall
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


async def test_final_result_fires_exactly_once_per_turn_whatever_the_turn_did():
    finals = []

    class Final(BasePlugin):
        @on.final_result()
        async def final(self, event, chain, *_):
            finals.append(chain.plain_text)

        @register.tool("noop", "Does nothing", {"type": "object", "properties": {}})
        async def noop(self, event, *_):
            return "ok"

    from core.provider import ProviderError

    model = ScriptedProvider(["plain", [ToolCall("noop", {})], "after a tool", ProviderError("down"), ""])
    async with ChatHarness(plugins=[Final], provider=model) as bot:
        for text in ("one", "two", "three", "four"):
            await bot.send(text)
    assert len(finals) == 4
    assert finals[:2] == ["plain", "after a tool"]
    assert "could not get an answer" in finals[2], "a turn that ended in a model error still ends"
    assert finals[3] == "", "a turn whose model said nothing still ends"


async def test_stop_lets_no_text_be_sent():
    class Stop(BasePlugin):
        @on.llm_response()
        async def stop(self, event, resp, *_):
            event.stop()

    async with ChatHarness(plugins=[Stop], provider=ScriptedProvider(["<msg>leak</msg>"])) as bot:
        assert await bot.send("hi") == []
        assert bot.sent == []


async def test_two_turns_of_one_session_never_run_at_once():
    class Slow(LLMProvider):
        running = 0
        overlap = 0

        async def complete(self, req: LLMRequest) -> LLMResponse:
            Slow.running += 1
            Slow.overlap = max(Slow.overlap, Slow.running)
            await asyncio.sleep(0.01)
            Slow.running -= 1
            return LLMResponse(text_response=req.user_prompt)

    class Trigger(BasePlugin):
        @on.im_message()
        async def now(self, event, *_):
            event.trigger()

    async with ChatHarness(plugins=[Trigger], builtins=(), provider=Slow()) as bot:
        turns = [(await bot.app.receive(bot.message(f"m{i}"))).turn for i in range(5)]
        await asyncio.gather(*turns)
        history = await bot.app.history.get_history("test:dm:user")
    assert Slow.overlap == 1
    # Messages that arrive before the session's turn starts join its one waiting batch (docs/pipeline.md): however
    # they were batched, each is in the history once, in arrival order.
    said = "\n".join(m.content for m in history if m.role == "user")
    places = [said.find(f"m{i}") for i in range(5)]
    assert -1 not in places and places == sorted(places), "history never forks"
    assert all(said.count(f"m{i}") == 1 for i in range(5))


async def test_one_malformed_character_never_drops_the_reply():
    model = ScriptedProvider(["<msg>I <3 you & me</msg>", "<msg><text>a < b && c</text>"])
    async with ChatHarness(provider=model) as bot:
        assert [c.plain_text for c in await bot.send("hi")] == ["I <3 you & me"]
        assert [c.plain_text for c in await bot.send("again")] == ["a < b && c"]


async def test_invalid_tool_arguments_never_reach_the_tool():
    called = []

    class Strict(BasePlugin):
        @register.tool(
            "count",
            "Count",
            {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}, "required": ["n"]},
        )
        async def count(self, event, *_, n: int):
            called.append(n)
            return str(n)

    calls = [ToolCall("count", {"n": -1}), ToolCall("count", {}), ToolCall("count", {"n": "3"})]
    async with ChatHarness(plugins=[Strict], provider=ScriptedProvider([calls, "ok"])) as bot:
        await bot.send("count")
    assert called == []
    errors = [m.content for m in bot.requests[1].messages if m.role == "tool"]
    assert all(e.startswith("error: invalid arguments for count") for e in errors)


async def test_unloading_a_plugin_never_removes_another_plugins_tool_or_tag_of_the_same_name():
    def provider_of(label):
        class Plugin(BasePlugin):
            @register.tool("search", f"Search by {label}", {"type": "object", "properties": {}})
            async def search(self, event, *_):
                return label

            @register.tag("stamp", f"stamp by {label}")
            async def stamp(self, value, **attrs):
                return [Text(f"{label}:{value}")]

        Plugin.__name__ = f"Plugin{label.capitalize()}"
        return Plugin

    model = ScriptedProvider([[ToolCall("search", {})], "<msg><stamp>x</stamp></msg>"])
    async with ChatHarness(plugins=[provider_of("alpha"), provider_of("beta")], provider=model) as bot:
        await bot.app.plugins.unload("plugin_beta")
        chains = await bot.send("search")
        assert bot.app.plugins.tools.owner_of("search") == "plugin_alpha"
        assert bot.app.plugins.tags.owner_of("stamp") == "plugin_alpha"
    assert model.requests[1].messages[-1].content == "alpha"
    assert chains[0].plain_text == "alpha:x"


async def test_file_and_image_tags_never_send_a_path_outside_the_allowed_directories(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    model = ScriptedProvider([f"<msg><file>{secret}</file><img>/etc/passwd</img><file>../../etc/hosts</file></msg>"])
    async with ChatHarness(provider=model) as bot:
        chains = await bot.send("send me files")
    sent = [e for chain in chains for e in chain]
    assert not any(isinstance(e, File | Image) for e in sent)
    assert sent, "the refusal is said in words, the reply is not dropped"


async def test_no_blocking_file_io_on_the_event_loop(tmp_path, monkeypatch):
    loop_thread = threading.get_ident()
    readers = []
    from pathlib import Path

    real_read_bytes = Path.read_bytes

    def recording_read_bytes(self):
        if self.name == "p.png":
            readers.append(threading.get_ident())
        return real_read_bytes(self)

    monkeypatch.setattr(Path, "read_bytes", recording_read_bytes)
    picture = tmp_path / "p.png"
    picture.write_bytes(b"\x89PNG")
    assert await Image(path=str(picture)).get_bytes() == b"\x89PNG"
    assert readers and loop_thread not in readers

    calls = []

    class Tools(BasePlugin):
        @register.tool("sync_tool", "A sync handler", {"type": "object", "properties": {}})
        async def sync_tool(self, event, *_):
            return "fine"

    from core.utils.tool_utils import FunctionTool

    def blocking_handler():
        calls.append(threading.get_ident())
        return "done"

    async with ChatHarness(plugins=[Tools], provider=ScriptedProvider([[ToolCall("blocking", {})], "ok"])) as bot:
        bot.app.plugins.tools.add(
            "blocking", FunctionTool("blocking", "sync", None, blocking_handler, pass_event=False), "tools"
        )
        await bot.send("go")
    assert calls and loop_thread not in calls, "a sync tool handler runs in a worker thread"


async def test_pipeline_errors_are_never_swallowed_without_a_log_line(caplog):
    class Broken(BasePlugin):
        @on.after_xml_parse()
        async def hook(self, event, chain, *_):
            raise RuntimeError("hook broke")

        @register.tool("tool", "Breaks", {"type": "object", "properties": {}})
        async def tool(self, event, *_):
            raise RuntimeError("tool broke")

        @register.tag("bad", "Breaks")
        async def bad(self, value, **attrs):
            raise RuntimeError("tag broke")

    model = ScriptedProvider([[ToolCall("tool", {})], "<msg><bad>still shown</bad></msg>"])
    with caplog.at_level(logging.ERROR, logger="hookchat"):
        async with ChatHarness(plugins=[Broken], provider=model) as bot:
            chains = await bot.send("hi")
    assert chains[0].plain_text == "still shown"
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    for needle in ("hook broke", "tool", "tag"):
        assert any("'broken'" in e and needle in e for e in errors), (needle, errors)
