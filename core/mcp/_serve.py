"""hookchat's own tools over MCP (`hookchat mcp serve`): the global tools plugins registered (`@register.tool`,
`@llm_tool`, `register_llm_tool`), with their schemas, for another MCP client (an IDE, an agent) to call, over
stdio or streamable HTTP. Arguments are checked against the schema and each call runs under the tool's timeout,
as in a turn; tools of MCP servers and remote tools are not served again. HTTP always needs a bearer token.
"""

from __future__ import annotations

import base64
import contextlib
import hmac
import secrets
from typing import Any

import anyio
import mcp_types as types
from mcp.server import Server
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from core.chat.message_elements import Image, Record
from core.mcp._connection import OWNER_PREFIX
from core.provider.agent import to_tool_result
from core.server import EmbeddedServer
from core.services import remote_owner, visible_tools
from core.utils.json_schema import UnusableSchemaError, schema_errors
from core.utils.log import get_logger
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import BaseTool

__all__ = ["McpToolServer", "McpHttpListener", "McpServeError", "LOOPBACK_HOSTS"]

logger = get_logger("mcp.serve")

LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")


class McpServeError(RuntimeError):
    """`hookchat mcp serve` cannot serve as asked (beyond loopback without a token)."""


def _is_loopback(host: str) -> bool:
    return host in LOOPBACK_HOSTS or host.startswith("127.")


class _BearerGate:
    """ASGI middleware: every HTTP request carries `Authorization: Bearer <token>` (compared in constant time)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = dict(scope.get("headers") or [])
            scheme, _, given = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token):
                response = JSONResponse(
                    {"error": "missing or wrong bearer token (Authorization: Bearer <token>)"},
                    status_code=401,
                    headers={"WWW-Authenticate": "Bearer"},
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


class McpToolServer:
    """An MCP server over the tools of `tools` (the app's registry): the global tools plugins registered."""

    def __init__(self, tools: OwnedRegistry[BaseTool], *, name: str = "hookchat") -> None:
        self.tools = tools
        self.server: Server[Any] = Server(name, on_list_tools=self._list_tools, on_call_tool=self._call_tool)

    def offered(self) -> list[BaseTool]:
        """The tools served: every global tool (no role) whose owner is a plugin."""
        return [
            tool
            for tool in visible_tools(self.tools, None)
            if tool.role is None and not str(tool.owner or "").startswith((OWNER_PREFIX, remote_owner("")))
        ]

    async def _list_tools(self, ctx: Any, params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(name=tool.name, description=tool.description or None, input_schema=tool.parameters)
                for tool in self.offered()
            ]
        )

    async def _call_tool(self, ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = next((t for t in self.offered() if t.name == params.name), None)
        if tool is None:
            return _error(f"there is no tool called {params.name!r}")
        arguments = dict(params.arguments or {})
        try:
            with anyio.fail_after(tool.timeout):
                problems = await anyio.to_thread.run_sync(
                    schema_errors, tool.parameters, arguments, abandon_on_cancel=True
                )
                if problems:
                    return _error(f"invalid arguments for {tool.name}: {'; '.join(problems)}")
                output = await tool.invoke(None, arguments)  # no chat event: the call comes from outside a turn
        except TimeoutError:
            return _error(f"the tool {tool.name} did not answer within {tool.timeout:g} s")
        except UnusableSchemaError:
            return _error(f"the tool {tool.name} cannot be called: its parameters schema is broken")
        except Exception as exc:
            logger.exception("tool %s (plugin %r) raised when called over MCP", tool.name, tool.owner)
            return _error(f"the tool {tool.name} failed: {type(exc).__name__}: {exc}")
        result = to_tool_result(output)
        content: list[types.ContentBlock] = [types.TextContent(text=result.text)] if result.text else []
        for item in result.attachments:
            if not isinstance(item, Image | Record):
                continue
            if item.base64:
                data = item.base64
            elif item.path:
                data = base64.b64encode(await anyio.Path(item.path).read_bytes()).decode()
            else:
                continue
            mime = item.mime or ("image/png" if isinstance(item, Image) else "audio/wav")
            block_type = types.ImageContent if isinstance(item, Image) else types.AudioContent
            content.append(block_type(data=data, mime_type=mime))
        return types.CallToolResult(content=content, is_error=result.is_error)

    # -- transports -------------------------------------------------------------------------------------------------

    async def serve_stdio(self) -> None:
        """Serve on this process's stdin and stdout until the client closes them."""
        async with stdio_server() as (read, write):
            await self.server.run(read, write, self.server.create_initialization_options())

    def http(self, host: str = "127.0.0.1", port: int = 0, *, token: str | None = None) -> McpHttpListener:
        """A streamable-HTTP listener on `host:port` (path `/mcp`), behind a bearer token: `token`, or a random one
        made now (read it from `.token`) on loopback. Beyond loopback a token must be given."""
        if token is None:
            if not _is_loopback(host):
                raise McpServeError(
                    f"hookchat mcp serve is bound to {host}, beyond this machine: give it a token "
                    "(set HOOKCHAT_MCP_TOKEN), or bind to 127.0.0.1"
                )
            token = secrets.token_urlsafe(24)
        return McpHttpListener(self.server, host, port, token)


class McpHttpListener:
    """The streamable-HTTP listener of an `McpToolServer`, serving inside `async with listener:` (entered and left
    in one task: the SDK's session manager is a task group); `.url`, `.token`. Host and Origin are checked by the
    SDK's DNS-rebinding protection; every request needs the token."""

    def __init__(self, server: Server[Any], host: str, port: int, token: str) -> None:
        self.server = server
        self.host = host
        self.token = token
        allowed = ["127.0.0.1:*", "localhost:*", "[::1]:*"] if _is_loopback(host) else [f"{host}:*"]
        security = TransportSecuritySettings(
            enable_dns_rebinding_protection=True,
            allowed_hosts=allowed,
            allowed_origins=[f"http://{h}" for h in allowed],
        )
        app = server.streamable_http_app(host=host, transport_security=security)
        self.http = EmbeddedServer(_BearerGate(app, token), host, port, name="mcp serve")
        self._stack: contextlib.AsyncExitStack | None = None

    @property
    def url(self) -> str:
        """The MCP endpoint, e.g. `http://127.0.0.1:8790/mcp`."""
        return f"{self.http.url}/mcp"

    async def __aenter__(self) -> McpHttpListener:
        """Bind and serve (raises `OSError` when the address is taken)."""
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(self.server.session_manager.run())
            await self.http.start()
            stack.push_async_callback(self.http.stop)
            self._stack = stack.pop_all()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.aclose()


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=f"error: {text}")], is_error=True)
