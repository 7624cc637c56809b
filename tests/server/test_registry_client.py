"""`ToolRegistryClient` in-process: registration, the callback protocol, re-registration when the registry lost
its tools or restarted, and clean-up on stop."""

import asyncio

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from core.provider import ToolCall
from core.server import SIGNATURE_HEADER, EmbeddedServer, ToolRegistryClient, callback_signature
from core.testing import ScriptedProvider
from core.utils.tool_utils import ToolDefinitionError
from tests.server.registry_helpers import TEXT_TOOL, TOKEN, auth, callback_server, registration, registry_bot

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
    calls = [
        ToolCall("reverse", {"text": "abc"}),
        ToolCall("explode", {"text": "x"}),
        ToolCall("refuse", {"text": "y"}),
    ]
    provider = ScriptedProvider([calls, "ok"])
    async with registry_bot(provider, tmp_path) as (bot, server):
        async with make_client(server.url) as client:
            assert client.registered
            await bot.send("go")
    results = [m.content for m in provider.requests[1].messages if m.role == "tool"]
    assert results[0] == "cba"
    assert results[1] == "error: ValueError: cannot explode x"
    assert results[2] == 'error: refused on purpose\n{"text": "y"}'


async def test_callbacks_need_the_signature_of_their_source(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with make_client(server.url) as client:
            async with httpx.AsyncClient() as http:
                body = {"name": "reverse", "arguments": {"text": "x"}, "call_id": "c", "raw_arguments": "{}"}

                async def call(headers):
                    return await http.post(client.callback_url("reverse"), json=body, headers=headers)

                anonymous = await call({})
                bearer = await call(auth())  # the registry token itself is not what a callback gets
                other_source = await call({SIGNATURE_HEADER: callback_signature(TOKEN, "another-source")})
                signed = await call({SIGNATURE_HEADER: callback_signature(TOKEN, "inproc")})
                probe = await http.get(client.callback_url("reverse"))
                unknown = await http.get(client.callback_url("nothing"))
    assert anonymous.status_code == bearer.status_code == other_source.status_code == 401
    assert signed.json() == {"output": "x", "is_error": False}
    assert probe.status_code == 200 and unknown.status_code == 404


async def test_the_registry_never_sends_its_token_to_a_callback(tmp_path):
    seen = []

    def answer(body):
        return {"output": "ok", "is_error": False}

    provider = ScriptedProvider([[ToolCall("sniffed", {"text": "x"})], "done"])
    async with callback_server(answer, seen_headers=seen) as cb, registry_bot(provider, tmp_path) as (bot, server):
        await server.registry.register(registration("sniffed", f"{cb.url}/cb"))
        server.registry._hide(server.registry.get("tests", "sniffed"), "as after a refused call")
        assert await server.registry.recheck() == 1  # a probe (GET) reached the callback
        await bot.send("go")  # and a call (POST)
    assert {method for method, _ in seen} == {"GET", "POST"}
    assert all(TOKEN not in value for _, headers in seen for value in headers.values())
    assert [h.get("x-hookchat-signature") for m, h in seen if m == "POST"] == [callback_signature(TOKEN, "tests")]
    assert [h.get("x-hookchat-signature") for m, h in seen if m == "GET"] == [None]


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


def test_a_client_without_a_token_is_refused_at_once(monkeypatch):
    monkeypatch.delenv("HOOKCHAT_SERVER_TOKEN", raising=False)
    with pytest.raises(ValueError, match="needs the registry's token"):
        ToolRegistryClient("http://127.0.0.1:1", source="files")
    with pytest.raises(ValueError, match="HOOKCHAT_SERVER_TOKEN"):
        ToolRegistryClient("http://127.0.0.1:1", source="files", token="")


async def test_stop_propagates_the_callers_cancellation_and_still_closes():
    client = ToolRegistryClient("http://127.0.0.1:9", source="s", token=TOKEN, probe_interval=3600)
    await client.start()
    stopping = asyncio.create_task(client.stop(unregister=False))
    await asyncio.sleep(0)  # stop() now waits for its watch task
    stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert not client.serving and client.registered is False


async def test_tools_the_client_no_longer_offers_are_unregistered(tmp_path):
    def client_with(url, names):
        client = ToolRegistryClient(url, source="svc", token=TOKEN, probe_interval=3600)
        for name in names:
            client.add_tool(name, lambda **kw: "ok", parameters=TEXT_TOOL)
        return client

    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        old = client_with(server.url, ["keep", "dropped"])
        await old.start()
        await old.stop(unregister=False)  # the process was killed: nothing was cleared
        new = client_with(server.url, ["keep"])  # its next version, same source
        async with new:
            assert new.registered
            assert [t["name"] for t in server.registry.list("svc")] == ["keep"]
            assert sorted(t.name for t in bot.app.plugins.tools.active()) == ["keep"]


async def test_a_refused_tool_is_logged_once_and_not_registered_again_at_every_check(tmp_path, caplog):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        client = make_client(server.url)
        client.add_tool("wordy", lambda: "x", description="x" * 10_000)  # over the registry's 8192 characters
        async with client:
            accepted = server.registry.get("inproc", "reverse")
            for _ in range(3):
                assert await client.sync() is False
            assert server.registry.get("inproc", "reverse") is accepted, "nothing was registered again"
            assert client.boot_id == server.registry.boot_id and list(client.refused) == ["wordy"]
            server.registry.boot_id = "restarted"  # a restarted registry gets another chance
            await client.sync()
    refusals = [r for r in caplog.records if "refused tool 'wordy'" in r.getMessage()]
    assert len(refusals) == 2


async def test_an_answer_that_is_not_the_registrys_json_counts_as_unreachable():
    odd = EmbeddedServer(Starlette(routes=[Route("/api/tools", lambda r: PlainTextResponse("<html>proxy</html>"))]))
    await odd.start()
    try:
        async with ToolRegistryClient(odd.url, source="s", token=TOKEN, probe_interval=3600) as client:
            assert client.registered is False
            assert await client.sync() is False
    finally:
        await odd.stop()


async def test_a_failed_start_leaves_nothing_running(monkeypatch):
    client = ToolRegistryClient("http://127.0.0.1:9", source="s", token=TOKEN, probe_interval=3600)

    async def broken_sync():
        raise RuntimeError("boom")

    monkeypatch.setattr(client, "sync", broken_sync)
    with pytest.raises(RuntimeError, match="boom"):
        await client.start()
    assert not client.serving and client._http is None
    assert not [t for t in asyncio.all_tasks() if "tool callbacks" in t.get_name()]


async def test_the_watch_registers_again_after_a_restart_with_an_empty_database(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path / "first") as (bot, server):
        port = server.port
        client = ToolRegistryClient(server.url, source="inproc", token=TOKEN, probe_interval=0.05)
        client.add_tool("reverse", lambda *, text: text[::-1], parameters=TEXT_TOOL)
        await client.start()
        assert "reverse" in bot.app.plugins.tools
    try:
        # Another registry on the same port, with nothing stored: only the client's own checks can bring it back.
        async with registry_bot(ScriptedProvider(), tmp_path / "second", port=port) as (bot, server):
            with anyio.fail_after(10):
                while not (client.registered and client.boot_id == server.registry.boot_id):
                    await asyncio.sleep(0.02)
            assert "reverse" in bot.app.plugins.tools
    finally:
        await client.stop(unregister=False)
