"""The registry across processes: a second process registers a tool with `ToolRegistryClient` and the model calls
it; the tool stays callable when the registry restarts and when the other process restarts, with nobody
re-registering by hand."""

import json

import httpx
import pytest

from core.provider import ToolCall
from core.testing import ScriptedProvider
from tests.server.registry_helpers import RemoteProcess, auth, registry_bot

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def shout(text: str) -> list[ToolCall]:
    return [ToolCall("shout", {"text": text})]


def answer(provider: ScriptedProvider) -> dict:
    [message] = [m.content for m in provider.requests[-1].messages if m.role == "tool"][-1:]
    return json.loads(message)


async def test_a_second_process_offers_a_tool_the_model_calls(tmp_path):
    provider = ScriptedProvider([shout("hello"), "done"])
    async with registry_bot(provider, tmp_path / "data") as (bot, server):
        remote = RemoteProcess(server.url, tmp_path / "remote.log")
        try:
            await remote.start()
            async with httpx.AsyncClient(base_url=server.url, headers=auth()) as http:
                listed = (await http.get("/api/tools", params={"source": "proc-tools"})).json()["tools"]
            assert [t["name"] for t in listed] == ["shout"] and listed[0]["available"]
            await bot.send("shout hello")
        finally:
            await remote.stop()
    result = answer(provider)
    assert result["shouted"] == "HELLO" and result["pid"] != 0


async def test_the_tool_is_callable_again_after_the_registry_restarts(tmp_path):
    data = tmp_path / "data"
    first = ScriptedProvider([shout("one"), "ok"])
    remote = None
    try:
        async with registry_bot(first, data) as (bot, server):
            port = server.port
            remote = RemoteProcess(server.url, tmp_path / "remote.log")
            await remote.start()
            await bot.send("first")
        assert answer(first)["shouted"] == "ONE"
        # The registry (and the whole bot) is gone; it comes back on the same port with the same data directory.
        second = ScriptedProvider([shout("two"), "ok"])
        async with registry_bot(second, data, port=port) as (bot, server):
            assert "shout" in bot.app.plugins.tools, "the stored registration is back once its callback answers"
            await bot.send("second")
        assert answer(second)["shouted"] == "TWO"
    finally:
        if remote is not None:
            await remote.stop()


async def test_the_tool_is_callable_again_after_the_other_process_restarts(tmp_path):
    provider = ScriptedProvider([shout("a"), "ok", shout("b"), "ok", shout("c"), "ok"])
    async with registry_bot(provider, tmp_path / "data") as (bot, server):
        remote = RemoteProcess(server.url, tmp_path / "remote.log")
        try:
            await remote.start()
            await bot.send("a")
            first_pid = answer(provider)["pid"]
            await remote.stop()
            await bot.send("b")  # the process is gone: an error the model sees, and the tool is hidden
            [gone] = [m.content for m in provider.requests[-1].messages if m.role == "tool"][-1:]
            assert gone.startswith("error: ") and "unreachable" in gone
            assert "shout" not in bot.app.plugins.tools
            await remote.start()
            assert "shout" in bot.app.plugins.tools
            await bot.send("c")
        finally:
            await remote.stop()
    result = answer(provider)
    assert result["shouted"] == "C" and result["pid"] != first_pid
