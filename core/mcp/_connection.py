"""One MCP server as a tool source: its persistent session (stdio, streamable HTTP or SSE on the `mcp` SDK), the
reconnection with backoff after it drops (a stdio server that dies is started again), its tools in the app's tool
registry under the owner `mcp:<server>`, re-listed on `notifications/tools/list_changed`, and its tool calls.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

import anyio
import httpx2
import mcp_types as types
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.session import IncomingMessage
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.message import SessionMessage

from core import __version__
from core.config import McpServerConfig
from core.mcp._errors import McpConfigError
from core.mcp._results import to_tool_result
from core.provider import ToolResult
from core.trace import current_trace
from core.utils.log import get_logger
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import BaseTool, ToolDefinitionError

__all__ = [
    "McpConnection",
    "McpTool",
    "ServerState",
    "ToolListing",
    "McpConfigError",
    "expand_env",
    "OWNER_PREFIX",
    "MAX_TOOLS",
    "MAX_DESCRIPTION",
    "MAX_SCHEMA_BYTES",
]

logger = get_logger("mcp")

OWNER_PREFIX = "mcp:"
#: Tools taken from one server; the rest of its listing is ignored (and said so in its status).
MAX_TOOLS = 256
#: Characters of a tool's description offered to the model; a longer one is cut (a 1 MB description is a prompt
#: injection, not documentation).
MAX_DESCRIPTION = 8192
#: Bytes of one tool's parameters schema (as JSON); a bigger schema refuses the tool.
MAX_SCHEMA_BYTES = 64 * 1024
#: Bytes of one message a streamable-HTTP server may stream (the SDK's default is 1 MiB); a bigger one ends the
#: connection, and the call in flight becomes an error.
MAX_MESSAGE_BYTES = 8 * 1024 * 1024
#: Seconds before the first reconnection attempt; doubled after each failure up to `BACKOFF_MAX`.
BACKOFF_START = 0.5
BACKOFF_MAX = 30.0
#: A session that stayed up this long resets the backoff: the next drop is retried quickly again.
STABLE_AFTER = 30.0
#: Seconds a ready session has to end gracefully at `stop()` before it is cancelled (a stdio server still gets
#: the SDK's own sequence: stdin closed, 2 s, SIGTERM to its group, 2 s, SIGKILL).
STOP_GRACE = 5.0
_STDERR_LOG_LIMIT = 1024 * 1024
_LAUNCHER = Path(__file__).with_name("_launcher.py")
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ServerState(StrEnum):
    """Where a server's connection is: `stopped` (not started, or shut down), `idle` (lazy, not connected yet),
    `connecting`, `ready`, `retrying` (it dropped or failed; the next attempt is scheduled), `disabled`."""

    STOPPED = "stopped"
    IDLE = "idle"
    CONNECTING = "connecting"
    READY = "ready"
    RETRYING = "retrying"
    DISABLED = "disabled"


@dataclass(slots=True)
class ToolListing:
    """One tool a server listed and what became of it: `offered` under `name` (which differs from `remote_name`
    when it was renamed to avoid a collision), or `refused` with the `reason`."""

    remote_name: str
    name: str
    status: str
    reason: str = ""

    def to_dict(self) -> dict[str, str]:
        """The listing as JSON data (`hookchat mcp list --json`, the web console)."""
        return {"remote_name": self.remote_name, "name": self.name, "status": self.status, "reason": self.reason}


def expand_env(value: str, where: str, env: dict[str, str] | None = None) -> str:
    """`value` with each `${NAME}` replaced by that environment variable; `McpConfigError` naming `where` when one is
    not set (a secret that is missing must not become an empty header)."""
    source = os.environ if env is None else env

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in source:
            raise McpConfigError(
                f"{where}: the environment variable {name} is not set (export it, or remove ${{{name}}} from the value)"
            )
        return source[name]

    return _ENV_REF.sub(replace, value)


class McpTool(BaseTool):
    """A tool an MCP server offers, as the model sees it; calling it calls the server through its connection."""

    remote = True

    def __init__(
        self,
        connection: McpConnection,
        remote_name: str,
        name: str,
        description: str,
        parameters: dict[str, Any],
        timeout: float,
    ) -> None:
        self.connection = connection
        self.remote_name = remote_name
        self.name, self.description, self.parameters, self.timeout = name, description, parameters, timeout
        super().__init__()

    @property
    def owner(self) -> str | None:
        """`mcp:<server>`: the registry owner of every tool of that server."""
        return self.connection.owner

    async def invoke(self, event: Any, arguments: dict[str, Any]) -> ToolResult:
        """Call the tool on its server (the agent loop has validated the arguments and holds the deadline)."""
        return await self.connection.call_tool(self.remote_name, arguments, timeout=self.timeout)


@dataclass
class _Flags:
    """What wakes a connected session's loop: the transport closed, a re-list was asked for, a stop."""

    closed: bool = False
    relist: bool = False
    stop: bool = False
    wake: anyio.Event = field(default_factory=anyio.Event)

    def raise_flag(self, name: str) -> None:
        setattr(self, name, True)
        self.wake.set()


class McpConnection:
    """The connection to one configured MCP server, offering its tools in `tools` (the app's registry).

    `start()` begins connecting and waits up to its `connect_timeout` for the first session (a failure is logged
    and retried in the background, never raised); `stop()` ends the session (a stdio
    server is asked to exit, then its process group is killed) and withdraws the tools; `restart()` is both.
    A lazy server with a tool list cached from an earlier run offers those tools at once and connects on the
    first call; without a cache it connects at start to learn them.
    """

    def __init__(
        self,
        config: McpServerConfig,
        tools: OwnedRegistry[BaseTool],
        *,
        data_dir: Path | None = None,
        source: str = "hookchat.toml",
    ) -> None:
        self.config = config
        self.tools = tools
        self.source = source
        self.data_dir = Path(data_dir) / "mcp" if data_dir is not None else None
        self.state = ServerState.DISABLED if not config.enabled else ServerState.STOPPED
        self.last_error: str | None = None
        self.listings: list[ToolListing] = []
        self.connects = 0
        self.server_info: str = ""
        self._session: ClientSession | None = None
        self._ready = anyio.Event()
        self._flags = _Flags()
        self._scope: anyio.CancelScope | None = None
        self._done: anyio.Event | None = None
        self._first_attempt = anyio.Event()
        self._task_group: anyio.abc.TaskGroup | None = None

    @property
    def name(self) -> str:
        """The server's configured name."""
        return self.config.name

    @property
    def owner(self) -> str:
        """`mcp:<server>`, the tool registry owner of its tools."""
        return f"{OWNER_PREFIX}{self.config.name}"

    @property
    def running(self) -> bool:
        """Whether its connection task runs (connecting, connected or waiting to retry)."""
        return self._done is not None and not self._done.is_set()

    def status(self) -> dict[str, Any]:
        """The server's state as JSON data: name, transport, state, last error, tools and what became of them."""
        cfg = self.config
        return {
            "name": cfg.name,
            "type": cfg.type,
            "target": cfg.command if cfg.type == "stdio" else cfg.url,
            "enabled": cfg.enabled,
            "lazy": cfg.lazy,
            "state": str(self.state),
            "last_error": self.last_error,
            "connects": self.connects,
            "server": self.server_info,
            "tools": [listing.to_dict() for listing in self.listings],
        }

    # -- lifecycle --------------------------------------------------------------------------------------------------

    async def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start the connection in `task_group` (the manager's); see the class for what waits and what does not."""
        self._task_group = task_group
        if not self.config.enabled:
            self.state = ServerState.DISABLED
            return
        if self.config.lazy and await self._offer_cached():
            self.state = ServerState.IDLE
            return
        self._launch()  # a lazy server without a cached list connects now, to learn its tools
        with anyio.move_on_after(self.config.connect_timeout + 1):
            await self._first_attempt.wait()

    def _launch(self) -> None:
        if self.running or self._task_group is None:
            return
        self._done = anyio.Event()
        self._first_attempt = anyio.Event()
        self._flags = _Flags()
        self._task_group.start_soon(self._run, name=f"hookchat:mcp:{self.name}")

    async def stop(self) -> None:
        """End the session and the reconnection loop; the tools leave the registry. Safe twice."""
        done = self._done
        if done is not None and not done.is_set():
            self._flags.raise_flag("stop")  # a ready session ends gracefully; anything else is cancelled
            with anyio.CancelScope(shield=True):
                if self.state is not ServerState.READY and self._scope is not None:
                    self._scope.cancel()
                with anyio.move_on_after(STOP_GRACE):
                    await done.wait()
                if not done.is_set() and self._scope is not None:
                    self._scope.cancel()
                    await done.wait()
        self._withdraw()
        self.listings = []
        self.state = ServerState.DISABLED if not self.config.enabled else ServerState.STOPPED

    async def restart(self) -> None:
        """Stop, then start again (connecting now, even a lazy server)."""
        await self.stop()
        if self.config.enabled and self._task_group is not None:  # not before the manager started it
            self._launch()
            with anyio.move_on_after(self.config.connect_timeout + 1):
                await self._first_attempt.wait()

    async def set_enabled(self, enabled: bool) -> None:
        """Enable (and start) or disable (and stop) the server for this run of the app."""
        self.config = self.config.model_copy(update={"enabled": enabled})
        if enabled:
            await self.restart()
        else:
            await self.stop()

    async def _run(self) -> None:
        delay = BACKOFF_START
        try:
            with anyio.CancelScope() as self._scope:
                while not self._flags.stop:
                    self.state = ServerState.CONNECTING
                    began = time.monotonic()
                    try:
                        await self._session_once()
                        if not self._flags.stop:
                            self.last_error = "the server closed the connection"
                            logger.warning("MCP server %r closed the connection; reconnecting", self.name)
                    except Exception as exc:
                        self.last_error = _describe(exc)
                        logger.warning("MCP server %r: %s; retrying in %g s", self.name, self.last_error, delay)
                    finally:
                        self._session = None
                        self._ready = anyio.Event()
                        self._first_attempt.set()
                    if self._flags.stop:
                        break
                    self._withdraw()
                    if time.monotonic() - began > STABLE_AFTER:
                        delay = BACKOFF_START
                    self.state = ServerState.RETRYING
                    await anyio.sleep(delay)
                    delay = min(delay * 2, BACKOFF_MAX)
        finally:
            self._scope = None
            self._first_attempt.set()
            if self._done is not None:
                self._done.set()

    async def _session_once(self) -> None:
        flags = self._flags = _Flags()
        connect_by = anyio.current_time() + self.config.connect_timeout
        with anyio.CancelScope(deadline=connect_by) as connecting:
            async with self._transport() as (read, write):
                forward, inbox = anyio.create_memory_object_stream[SessionMessage | Exception](0)

                async def pump() -> None:
                    # Our own hop between transport and session: when the transport ends (the server died,
                    # the HTTP stream broke) this loop ends, and the session's loop below learns it.
                    try:
                        async with forward:
                            async for item in read:
                                await forward.send(item)
                    except (anyio.ClosedResourceError, anyio.BrokenResourceError, anyio.EndOfStream):
                        pass
                    finally:
                        flags.raise_flag("closed")

                async with anyio.create_task_group() as group:
                    group.start_soon(pump)
                    async with ClientSession(
                        inbox,
                        write,
                        message_handler=self._on_message,
                        client_info=types.Implementation(name="hookchat", version=__version__),
                    ) as session:
                        init = await session.initialize()
                        self.server_info = f"{init.server_info.name} {init.server_info.version}".strip()
                        await self._list_tools(session)
                        connecting.deadline = math.inf
                        self._session = session
                        self.connects += 1
                        self.state = ServerState.READY
                        self.last_error = None
                        self._ready.set()
                        self._first_attempt.set()
                        logger.info(
                            "MCP server %r ready (%s): %d tool(s)",
                            self.name,
                            self.server_info,
                            sum(t.status == "offered" for t in self.listings),
                        )
                        await self._serve(session, flags)
                    group.cancel_scope.cancel()
        if connecting.cancelled_caught:
            raise TimeoutError(f"no session within connect_timeout = {self.config.connect_timeout:g} s")

    async def _serve(self, session: ClientSession, flags: _Flags) -> None:
        while True:
            flags.wake = anyio.Event()
            if flags.stop or flags.closed:
                return
            if flags.relist:
                flags.relist = False
                try:
                    await self._list_tools(session)
                except MCPError as exc:
                    logger.warning("MCP server %r: re-listing its tools failed: %s", self.name, exc)
                continue
            await flags.wake.wait()

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            logger.info("MCP server %r: its tools changed; listing them again", self.name)
            self._flags.raise_flag("relist")
        elif isinstance(message, Exception):
            logger.warning("MCP server %r sent something that is not MCP: %s", self.name, _describe(message))

    @asynccontextmanager
    async def _transport(self) -> AsyncIterator[tuple[Any, Any]]:
        cfg = self.config
        where = f"{self.source}: MCP server {cfg.name!r}"
        if cfg.type == "stdio":
            assert cfg.command is not None
            env = {key: expand_env(value, f"{where}: env.{key}") for key, value in cfg.env.items()}
            command, args = cfg.command, list(cfg.args)
            path = {**os.environ, **env}.get("PATH", os.defpath)
            if shutil.which(command, path=path) is None:  # said here: behind the launcher it would read "closed"
                raise McpConfigError(
                    f"{where}: command {command!r} not found (not a file, or not on PATH); install "
                    "it or give its full path"
                )
            if os.name == "posix":  # the launcher ties the server's process group to this process (see it)
                command, args = sys.executable, ["-I", "-S", str(_LAUNCHER), str(os.getpid()), "--", command, *args]
            params = StdioServerParameters(
                command=command, args=args, env=env or None, cwd=str(cfg.cwd) if cfg.cwd else None
            )
            async with self._stderr_log() as errlog:
                async with stdio_client(params, errlog=errlog) as streams:
                    yield streams
            return
        assert cfg.url is not None
        headers = {key: expand_env(value, f"{where}: headers.{key}") for key, value in cfg.headers.items()}
        if cfg.type == "sse":
            async with sse_client(cfg.url, headers=headers or None, timeout=cfg.connect_timeout) as streams:
                yield streams
            return
        timeout = httpx2.Timeout(cfg.connect_timeout, read=max(cfg.timeout, 300.0))
        async with httpx2.AsyncClient(headers=headers, timeout=timeout) as client:
            async with streamable_http_client(
                cfg.url, http_client=client, max_sse_event_size=MAX_MESSAGE_BYTES
            ) as streams:
                yield streams

    @asynccontextmanager
    async def _stderr_log(self) -> AsyncIterator[TextIO]:
        """Where a stdio server's stderr goes: `<data>/mcp/<server>.stderr.log` (restarted past 1 MiB)."""
        data_dir = self.data_dir
        if data_dir is None:
            yield sys.stderr
            return
        path = data_dir / f"{self.name}.stderr.log"

        def open_log() -> TextIO:
            data_dir.mkdir(parents=True, exist_ok=True)
            mode = "w" if path.exists() and path.stat().st_size > _STDERR_LOG_LIMIT else "a"
            return path.open(mode, encoding="utf-8", errors="replace")

        log = await anyio.to_thread.run_sync(open_log)
        try:
            yield log
        finally:
            log.close()

    # -- tools ------------------------------------------------------------------------------------------------------

    async def _list_tools(self, session: ClientSession) -> None:
        listed: list[types.Tool] = []
        cursor: str | None = None
        for _page in range(16):
            params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await session.list_tools(params=params)
            listed.extend(page.tools)
            cursor = page.next_cursor
            if not cursor or len(listed) >= MAX_TOOLS:
                break
        self._offer(listed)
        await self._save_cache(listed)

    def _offer(self, listed: list[types.Tool]) -> None:
        """Put the server's tools in the registry (replacing its earlier ones) under the rules of every tool."""
        self.tools.remove_owner(self.owner)
        listings: list[ToolListing] = []
        for index, tool in enumerate(listed):
            if index >= MAX_TOOLS:
                listings.append(
                    ToolListing(tool.name, "", "refused", f"over the {MAX_TOOLS} tools taken from one server")
                )
                continue
            listings.append(self._offer_one(tool))
        self.listings = listings

    def _offer_one(self, tool: types.Tool) -> ToolListing:
        cfg = self.config
        schema = tool.input_schema
        size = len(json.dumps(schema, default=repr))
        if size > MAX_SCHEMA_BYTES:
            return self._refuse(
                tool.name, f"its parameters schema is {size // 1024} KiB, over {MAX_SCHEMA_BYTES // 1024} KiB"
            )
        description = tool.description or tool.title or ""
        if len(description) > MAX_DESCRIPTION:
            logger.warning(
                "MCP server %r: the description of tool %r is %d characters; the first %d are offered",
                cfg.name,
                tool.name,
                len(description),
                MAX_DESCRIPTION,
            )
            description = description[:MAX_DESCRIPTION] + " [description cut]"
        wanted = f"{cfg.tool_prefix}{tool.name}"
        names = [wanted]
        if not cfg.tool_prefix:
            names.append(f"{cfg.name}_{tool.name}")  # the collision rule: a taken name gets the server's prefix
        reason = ""
        for name in names:
            holder = self.tools.owner_of(name)
            if holder is not None and holder != self.owner:
                reason = f"the name {name!r} is taken by {holder}"
                continue
            try:
                offered = McpTool(self, tool.name, name, description, schema, cfg.timeout)
            except ToolDefinitionError as exc:
                return self._refuse(tool.name, str(exc).replace(" (registered by McpTool)", ""))
            self.tools.add(name, offered, self.owner)
            if reason:
                logger.warning("MCP server %r: tool %r offered as %r (%s)", cfg.name, tool.name, name, reason)
            return ToolListing(tool.name, name, "offered", reason)
        return self._refuse(tool.name, reason)

    def _refuse(self, remote_name: str, reason: str) -> ToolListing:
        logger.warning("MCP server %r: tool %r refused: %s", self.name, remote_name, reason)
        return ToolListing(remote_name, "", "refused", reason)

    def _withdraw(self) -> None:
        self.tools.remove_owner(self.owner)

    @property
    def _cache_path(self) -> Path | None:
        return self.data_dir / f"{self.name}.tools.json" if self.data_dir is not None else None

    async def _save_cache(self, listed: list[types.Tool]) -> None:
        path = self._cache_path
        if path is None or not self.config.lazy:
            return
        data = json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in listed[:MAX_TOOLS]])

        def write() -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(data, encoding="utf-8")
            tmp.replace(path)

        await anyio.to_thread.run_sync(write)

    async def _offer_cached(self) -> bool:
        path = self._cache_path
        if path is None:
            return False
        try:
            raw = await anyio.Path(path).read_text(encoding="utf-8")
            listed = [types.Tool.model_validate(item) for item in json.loads(raw)]
        except (OSError, ValueError):
            return False
        self._offer(listed)
        return True

    # -- calls ------------------------------------------------------------------------------------------------------

    async def call_tool(self, remote_name: str, arguments: dict[str, Any], *, timeout: float) -> ToolResult:
        """Call `remote_name` on the server with `arguments`. Every failure (not connected, the server dropped the
        connection, an MCP error, a malformed answer) is an error result the model sees; cancellation (the turn
        was cancelled, the tool's deadline passed) propagates, and the SDK tells the server the call is
        cancelled. Each call is recorded in the turn's trace as an `mcp` item."""
        started = time.perf_counter_ns()
        outcome = "error"
        result: ToolResult | None = None
        try:
            session = self._session
            if session is None:
                if self.state is ServerState.IDLE:
                    self._launch()
                with anyio.move_on_after(min(timeout, self.config.connect_timeout)):
                    await self._ready.wait()
                session = self._session
            if session is None:
                why = self.last_error or str(self.state)
                result = _error(f"the MCP server {self.name!r} is not connected ({why}); try again later")
                return result
            try:
                answer = await session.call_tool(remote_name, arguments, read_timeout_seconds=timeout)
            except MCPError as exc:
                if exc.code == types.CONNECTION_CLOSED:
                    result = _error(
                        f"the MCP server {self.name!r} closed the connection during the call (it is "
                        "being restarted); the call may or may not have taken effect"
                    )
                else:
                    result = _error(f"the MCP server {self.name!r} answered with an error: {exc.error.message}")
                return result
            except (ValueError, RuntimeError) as exc:  # a malformed answer (pydantic), an invalid structured one
                result = _error(
                    f"the MCP server {self.name!r} answered with something that is not a valid tool "
                    f"result: {_describe(exc)}"
                )
                return result
            result = to_tool_result(answer)
            outcome = "error" if result.is_error else "ok"
            return result
        except anyio.get_cancelled_exc_class():
            outcome = "cancelled"
            raise
        finally:
            trace = current_trace()
            if trace is not None:
                trace.add(
                    "mcp",
                    started,
                    server=self.name,
                    tool=remote_name,
                    arguments=arguments,
                    outcome=outcome,
                    error=result.text[:500] if result is not None and result.is_error else None,
                )


def _error(text: str) -> ToolResult:
    return ToolResult(text=f"error: {text}", is_error=True)


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        inner = exc.exceptions[0] if exc.exceptions else exc
        return _describe(inner)
    if isinstance(exc, MCPError):
        return f"MCP error {exc.code}: {exc.error.message}"
    if isinstance(exc, FileNotFoundError):
        return f"cannot start it: {exc.strerror or exc} ({exc.filename})"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}" if not isinstance(exc, TimeoutError | McpConfigError) else text
