"""The application's lifecycle: a failed start stops what started, nothing runs after shutdown, and a tool that
returns something malformed or runs past the operator's cap never crashes a turn."""

import asyncio

import pytest

from core.adapter import Adapter
from core.app import HookChat
from core.chat.message_elements import Image
from core.config import HookchatConfig
from core.history import HistoryError
from core.plugin import BasePlugin, register
from core.provider import ToolCall, ToolResult
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


async def test_a_failed_start_stops_everything_that_had_started(tmp_path):
    class Broken(Adapter):
        name = "broken"

        async def start(self, app):
            raise ConnectionError("platform unreachable")

        async def send(self, session, chain):
            raise AssertionError("never")

    config = HookchatConfig.model_validate({"data": {"dir": str(tmp_path)}, "plugins": {"dirs": []}})
    app = HookChat(
        config,
        provider=ScriptedProvider(),
        adapters=[Broken()],
        plugins=[BUILTIN_PLUGINS_DIR / "chat"],
        entry_points=False,
    )
    with pytest.raises(ConnectionError):
        await app.start()
    assert app.plugins.loaded_ids() == [] and app.plugins.hook_chains() == {}, "plugins were stopped"
    with pytest.raises(HistoryError, match="not open"):
        await app.history.get_history("test:dm:user")


async def test_no_turn_starts_after_shutdown():
    provider = ScriptedProvider(["late answer"])
    async with ChatHarness(provider=provider) as bot:
        app = bot.app
        message = bot.message("hi")
        await app.receive(message)
    turn = app.pipeline.flush(message.session)  # a debounce timer firing after shutdown
    assert turn is not None and turn.cancelled()
    await asyncio.sleep(0)
    assert bot.adapter.sent == [] and provider.requests == []


async def test_a_malformed_tool_result_or_an_overlong_tool_becomes_an_error_result():
    class Tools(BasePlugin):
        @register.tool("shot", "Returns attachments as a tuple", {"type": "object", "properties": {}})
        async def shot(self, event, *_):
            return ToolResult("done", attachments=(Image(url="http://example.invalid/a.png"),))

        @register.tool("slow", "Takes a while", {"type": "object", "properties": {}}, timeout=300)
        async def slow(self, event, *_):
            await asyncio.sleep(10)

    model = ScriptedProvider([[ToolCall("shot", {}), ToolCall("slow", {})], "fine"])
    config = {"limits": {"max_tool_timeout": 0.05, "tool_timeout": 0.05}}
    async with ChatHarness(plugins=[Tools], provider=model, config=config) as bot:
        assert [c.plain_text for c in await bot.send("go")] == ["fine"]
    results = [m.content for m in model.requests[1].messages if m.role == "tool"]
    assert results[0] == "done"
    assert results[1] == "error: the tool slow did not answer within 0.05 s", "the operator's cap wins"
