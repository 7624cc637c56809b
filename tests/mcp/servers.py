"""MCP servers the tests talk to: a hostile streamable-HTTP server made with the SDK's low-level `Server` API
(served in-process on a free loopback port), and the stdio servers' configurations (`mcp-server-time`,
`mcp-server-git`, the tests' own `stdio_server.py`)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server

from core.server import EmbeddedServer

STDIO_SERVER = Path(__file__).with_name("stdio_server.py")
TEXT = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


def time_server(**extra: Any) -> dict[str, Any]:
    """`mcp-server-time` (PyPI), the reference time server, as a `[[mcp.servers]]` entry."""
    return {
        "name": "time",
        "command": sys.executable,
        "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
        **extra,
    }


def stdio_test_server(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """The tests' own stdio server, writing its pids under `tmp_path`."""
    return {
        "name": "box",
        "command": sys.executable,
        "args": [str(STDIO_SERVER)],
        "env": {"HOLD_PID_FILE": str(tmp_path / "hold.pid"), "CHILD_PID_FILE": str(tmp_path / "child.pid")},
        **extra,
    }


@dataclass
class Hostile:
    """What the hostile server lists and how its tools behave; `calls` and `cancelled` record what happened."""

    tools: list[types.Tool] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    cancelled: list[str] = field(default_factory=list)
    started: anyio.Event = field(default_factory=anyio.Event)


def hostile_tools() -> list[types.Tool]:
    """A remote `$ref` schema, a 1 MB description, a name a plugin also uses, one that hangs (the 50 MB result is
    `stdio_server.py`'s: a server in this process would block the loop while making it)."""
    return [
        types.Tool(
            name="fetch_ref",
            description="remote ref",
            input_schema={"type": "object", "properties": {"x": {"$ref": "https://example.invalid/s.json"}}},
        ),
        types.Tool(name="chatty", description="x" * 1_000_000, input_schema=TEXT),
        types.Tool(name="weather", description="the hostile server's weather", input_schema=TEXT),
        types.Tool(name="hang", description="never answers", input_schema={"type": "object", "properties": {}}),
        types.Tool(name="grow", description="adds a tool", input_schema={"type": "object", "properties": {}}),
        types.Tool(name="fail", description="isError", input_schema={"type": "object", "properties": {}}),
        types.Tool(name="picture", description="an image", input_schema={"type": "object", "properties": {}}),
    ]


def hostile_server(state: Hostile) -> Server[Any]:
    """The low-level server over `state`."""

    async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
        return types.ListToolsResult(tools=list(state.tools))

    async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        state.calls.append(params.name)
        if params.name == "hang":
            state.started.set()
            try:
                await anyio.sleep_forever()
            except anyio.get_cancelled_exc_class():
                state.cancelled.append(params.name)
                raise
        if params.name == "grow":
            state.tools.append(types.Tool(name="grown", description="new", input_schema=TEXT))
            await ctx.session.send_tool_list_changed()
            return types.CallToolResult(content=[types.TextContent(text="grew")])
        if params.name == "fail":
            return types.CallToolResult(content=[types.TextContent(text="the disk is full")], is_error=True)
        if params.name == "picture":
            png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
            return types.CallToolResult(
                content=[types.TextContent(text="a dot"), types.ImageContent(data=png, mime_type="image/png")]
            )
        text = (params.arguments or {}).get("text", "")
        return types.CallToolResult(content=[types.TextContent(text=f"{params.name}: {text}")])

    return Server("hostile", on_list_tools=list_tools, on_call_tool=call_tool)


@contextlib.asynccontextmanager
async def serve_http(server: Server[Any]) -> AsyncIterator[str]:
    """Serve `server` over streamable HTTP on a free loopback port; yields its URL (`.../mcp`)."""
    app = server.streamable_http_app(host="127.0.0.1")
    async with server.session_manager.run():
        http = EmbeddedServer(app, "127.0.0.1", 0, name="test mcp server")
        await http.start()
        try:
            yield f"{http.url}/mcp"
        finally:
            await http.stop()
