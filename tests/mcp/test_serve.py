"""`hookchat mcp serve`: the plugins' tools (`@register.tool`, the SDK's `@llm_tool`) served over MCP, driven by
the SDK's own client, over stdio (the real command) and streamable HTTP (behind a token, Host checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from core.mcp import McpServeError, McpToolServer
from core.testing import ChatHarness

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PLUGIN = """
from core.plugin import BasePlugin, register
from plugin.sdk.plugin import llm_tool


class Tools(BasePlugin):
    @register.tool("shout", "Upper-case a text", {"type": "object", "properties": {"text": {"type": "string"}},
                                                   "required": ["text"]})
    async def shout(self, event, text: str, *args, **kwargs):
        return text.upper()

    @llm_tool(name="add", description="Add two numbers",
              parameters={"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                          "required": ["a", "b"]})
    async def add(self, a: float, b: float):
        return {"sum": a + b}

    @register.tool("persona_only", "Not served: scoped to a persona", {"type": "object", "properties": {}},
                   role="alice")
    async def persona_only(self, event, *args, **kwargs):
        return "secret"
"""


def plugin_folder(root: Path) -> Path:
    folder = root / "plugins" / "served_tools"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "plugin_id": "served_tools",
                "display_name": "Served tools",
                "version": "1.0",
                "author": "tests",
                "description": "tools served over MCP",
                "core_version": ">=0.1",
            }
        )
    )
    (folder / "main.py").write_text(PLUGIN)
    return folder.parent


async def test_serve_over_stdio_is_driven_by_the_sdk_client(tmp_path):
    plugins = plugin_folder(tmp_path)
    config = tmp_path / "hookchat.toml"
    config.write_text(
        f'[plugins]\ndirs = ["{plugins}"]\n[data]\ndir = "{tmp_path / "data"}"\n'
        "[adapters]\nconsole = false\n"
        '[[mcp.servers]]\nname = "loop"\ncommand = "must-not-be-started"\n'
    )
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "core.cli", "-c", str(config), "mcp", "serve"],
        cwd=str(REPO),
        env={"PYTHONPATH": str(REPO)},
    )
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert set(tools) == {"shout", "add"}  # persona-scoped tools are not served
        assert tools["add"].input_schema["required"] == ["a", "b"]
        shouted = await session.call_tool("shout", {"text": "hi"})
        added = await session.call_tool("add", {"a": 2, "b": 3})
        wrong = await session.call_tool("add", {"a": "two"})
    assert shouted.content[0].text == "HI" and not shouted.is_error
    assert json.loads(added.content[0].text) == {"sum": 5}
    assert wrong.is_error and "invalid arguments" in wrong.content[0].text


async def test_serve_over_http_needs_the_token_and_checks_the_host(tmp_path):
    async with ChatHarness([plugin_folder(tmp_path) / "served_tools"]) as bot:
        server = McpToolServer(bot.app.plugins.tools)
        async with server.http("127.0.0.1", 0, token="s3cret") as listener:
            headers = {"Authorization": "Bearer s3cret"}
            async with httpx2.AsyncClient(headers=headers) as client:
                async with streamable_http_client(listener.url, http_client=client) as (read, write):
                    async with ClientSession(read, write) as session:
                        await session.initialize()
                        result = await session.call_tool("shout", {"text": "over http"})
            assert result.content[0].text == "OVER HTTP"
            init = {
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": {"name": "attacker", "version": "0"},
                },
            }
            accept = {"Accept": "application/json, text/event-stream"}
            async with httpx.AsyncClient(trust_env=False) as raw:
                no_token = await raw.post(listener.url, json=init, headers=accept)
                wrong = await raw.post(listener.url, json=init, headers={**accept, "Authorization": "Bearer nope"})
                other_host = await raw.post(
                    listener.url, json=init, headers={**accept, **headers, "Host": "evil.example"}
                )
                other_origin = await raw.post(
                    listener.url, json=init, headers={**accept, **headers, "Origin": "http://evil.example"}
                )
    assert no_token.status_code == 401 and wrong.status_code == 401
    assert other_host.status_code in (400, 421)  # the SDK's DNS-rebinding protection
    assert other_origin.status_code in (400, 403)


async def test_serve_over_http_makes_a_token_on_loopback_and_refuses_other_addresses_without_one(tmp_path):
    async with ChatHarness() as bot:
        server = McpToolServer(bot.app.plugins.tools)
        assert len(server.http("127.0.0.1", 0).token) >= 24
        with pytest.raises(McpServeError, match="beyond this machine"):
            server.http("0.0.0.0", 0)
