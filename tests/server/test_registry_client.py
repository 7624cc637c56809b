"""`ToolRegistryClient` in-process: registration, the callback protocol, re-registration when the registry lost
its tools or restarted, and clean-up on stop."""

import httpx
import pytest

from core.provider import ToolCall
from core.server import ToolRegistryClient
from core.testing import ScriptedProvider
from core.utils.tool_utils import ToolDefinitionError
from tests.server.registry_helpers import TEXT_TOOL, TOKEN, auth, registry_bot

pytestmark = pytest.mark.anyio


def make_client(url: str) -> ToolRegistryClient:
    client = ToolRegistryClient(url, source="inproc", token=TOKEN, probe_interval=3600)

    @client.tool("reverse", "Reverse a text", TEXT_TOOL)
    def reverse(*, text: str) -> str:  # sync handlers run in a worker thread
        return text[::-1]

    @client.tool("explode", "Always fails", TEXT_TOOL)
    async def explode(*, text: str):
        raise ValueError(f"cannot explode {text}")

    @client.tool("refuse", "Reports a tool-level error", TEXT_TOOL)
    async def refuse(*, text: str):
        return {"output": {"text": text}, "is_error": True, "error": "refused on purpose"}

    return client


async def test_client_tools_are_called_with_the_three_kinds_of_answer(tmp_path):
    calls = [ToolCall("reverse", {"text": "abc"}), ToolCall("explode", {"text": "x"}),
             ToolCall("refuse", {"text": "y"})]
    provider = ScriptedProvider([calls, "ok"])
    async with registry_bot(provider, tmp_path) as (bot, server):
        async with make_client(server.url) as client:
            assert client.registered
            await bot.send("go")
    results = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert results[0] == "cba"
    assert results[1] == "error: ValueError: cannot explode x"
    assert results[2] == 'error: refused on purpose\n{"text": "y"}'


async def test_callbacks_without_the_registry_token_are_refused(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with make_client(server.url) as client:
            async with httpx.AsyncClient() as http:
                body = {"name": "reverse", "arguments": {"text": "x"}, "call_id": "c", "raw_arguments": "{}"}
                anonymous = await http.post(client.callback_url("reverse"), json=body)
                with_token = await http.post(client.callback_url("reverse"), json=body, headers=auth())
                probe = await http.get(client.callback_url("reverse"))
                unknown = await http.get(client.callback_url("nothing"))
    assert anonymous.status_code == 401
    assert with_token.json() == {"output": "x", "is_error": False}
    assert probe.status_code == 200 and unknown.status_code == 404


async def test_the_client_registers_again_when_the_registry_lost_its_tools(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with make_client(server.url) as client:
            await server.registry.clear("inproc")
            assert "reverse" not in bot.app.plugins.tools
            assert await client.sync() is True
            assert "reverse" in bot.app.plugins.tools
            boot = client.boot_id
            server.registry.boot_id = "a-new-boot"  # as after a restart
            assert await client.sync() is True and client.boot_id == "a-new-boot" != boot


async def test_a_client_started_before_the_registry_registers_once_it_answers(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        url = server.url
        await server.stop()
        client = make_client(url)
        await client.start()
        try:
            assert client.registered is False
            await server.start()
            assert await client.sync() is True
            assert "reverse" in bot.app.plugins.tools
        finally:
            await client.stop()


async def test_stop_clears_the_sources_tools_and_remove_tool_unregisters_one(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        client = make_client(server.url)
        await client.start()
        assert await client.remove_tool("explode") is True
        assert "explode" not in bot.app.plugins.tools and "reverse" in bot.app.plugins.tools
        await client.stop()
        assert server.registry.list("inproc") == []
        assert not [t for t in bot.app.plugins.tools.active() if getattr(t, "remote", False)]


def test_client_tools_follow_the_tool_rules():
    client = ToolRegistryClient("http://127.0.0.1:1", source="rules", token=TOKEN)
    with pytest.raises(ToolDefinitionError, match="is invalid"):
        client.add_tool("bad name", lambda: None)
    with pytest.raises(ToolDefinitionError, match="at most 300"):
        client.add_tool("slow", lambda: None, timeout=600)
    with pytest.raises(ValueError, match="source"):
        ToolRegistryClient("http://127.0.0.1:1", source="no spaces allowed")
