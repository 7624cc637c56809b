"""The MCP servers of one app: built from `[[mcp.servers]]` and the `mcpServers` JSON file, started with the app,
stopped with it, and looked at or steered by the operator (`hookchat mcp list`, the web console)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
from pydantic import ValidationError

from core.config import HookchatConfig, McpServerConfig
from core.mcp._errors import McpConfigError
from core.utils.log import get_logger
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import BaseTool

if TYPE_CHECKING:
    from core.mcp._connection import McpConnection

__all__ = ["McpManager", "read_servers_file"]

logger = get_logger("mcp")

#: The keys of an `mcpServers` entry that hookchat reads; others (KiraAI's `name`, `description`) are ignored.
_FILE_KEYS = ("type", "command", "args", "env", "cwd", "url", "headers", "enabled", "timeout")
_TYPE_ALIASES = {"http": "streamable_http", "streamableHttp": "streamable_http", "streamable-http": "streamable_http"}


def read_servers_file(path: Path) -> list[McpServerConfig]:
    """The servers of an `mcpServers` JSON file (Claude Desktop's and KiraAI's format): each key is a server name;
    `command`/`args`/`env`/`cwd` or `url`/`headers`, `type`, `timeout`, and `enabled` (default true) or
    `disabled` are read. Raises `McpConfigError` naming the file and the key."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise McpConfigError(f"{path}: cannot read the MCP servers file ([mcp] servers_file): {exc}") from None
    except ValueError as exc:
        raise McpConfigError(f"{path}: not valid JSON: {exc}") from None
    servers = data.get("mcpServers") if isinstance(data, dict) else None
    if not isinstance(servers, dict):
        raise McpConfigError(f'{path}: expected an object {{"mcpServers": {{"name": {{...}}}}}}')
    out = []
    for name, entry in servers.items():
        if not isinstance(entry, dict):
            raise McpConfigError(f"{path}: mcpServers.{name}: expected an object")
        fields = {key: entry[key] for key in _FILE_KEYS if key in entry}
        if isinstance(fields.get("type"), str):
            fields["type"] = _TYPE_ALIASES.get(fields["type"], fields["type"])
        if entry.get("disabled") is True:
            fields["enabled"] = False
        try:
            out.append(McpServerConfig.model_validate({"name": name, **fields}, context={"base_dir": path.parent}))
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'entry'}: {e['msg'].removeprefix('Value error, ')}"
                for e in exc.errors(include_url=False, include_input=False)
            )
            raise McpConfigError(f"{path}: mcpServers.{name}: {problems}") from None
    return out


class McpManager:
    """Every configured MCP server of `config`, offering tools in `tools` (the app's tool registry).

    `await start()` reads the servers file, starts every enabled server, all at once, waiting for each up to its
    `connect_timeout` (a lazy server with a tool list cached from an earlier run is connected on its first call); `await aclose()` stops them all (no server process is left running). A
    server that fails is reported in its status and retried; it never stops the app from starting.
    """

    def __init__(self, config: HookchatConfig, tools: OwnedRegistry[BaseTool], *, data_dir: Path | None = None) -> None:
        self.config = config
        self.tools = tools
        self.data_dir = data_dir if data_dir is not None else Path(config.data.dir)
        self.connections: dict[str, McpConnection] = {}
        self._group: anyio.abc.TaskGroup | None = None
        self._owner: asyncio.Task[None] | None = None
        self._closing: anyio.Event | None = None

    def configured(self) -> list[McpServerConfig]:
        """Every server of `[[mcp.servers]]` and of the servers file; `McpConfigError` for a name given twice."""
        servers = list(self.config.mcp.servers)
        file = self.config.mcp.servers_file
        if file is not None:
            from_file = read_servers_file(file)
            taken = {s.name for s in servers}
            twice = sorted(s.name for s in from_file if s.name in taken)
            if twice:
                raise McpConfigError(
                    f"{file}: MCP server(s) {', '.join(twice)} are also in [[mcp.servers]] of "
                    f"{self.config.source}: give each name once"
                )
            servers.extend(from_file)
        return servers

    async def start(self) -> None:
        """Start the servers (see the class). Raises `McpConfigError` for a servers file that cannot be used."""
        if self._owner is not None:
            return
        servers = await anyio.to_thread.run_sync(self.configured)
        if not servers:
            return
        # The MCP SDK (and the HTTP clients it brings) is imported by the first app that has a server to talk to,
        # not by every `import core.app`: a plugin's tests and `hookchat plugins` start without it.
        from core.mcp._connection import McpConnection

        for server in servers:
            self.connections[server.name] = McpConnection(
                server, self.tools, data_dir=self.data_dir, source=self.config.source
            )
        ready = anyio.Event()
        self._closing = anyio.Event()

        closing = self._closing

        async def own() -> None:
            # The task group that owns every connection task, alive from start() to aclose().
            async with anyio.create_task_group() as group:
                self._group = group
                ready.set()
                await closing.wait()
                group.cancel_scope.cancel()

        self._owner = asyncio.get_running_loop().create_task(own(), name="hookchat:mcp")
        await ready.wait()
        owner = self._group
        assert owner is not None, "own() set it before ready"
        async with anyio.create_task_group() as starting:
            for connection in self.connections.values():
                starting.start_soon(connection.start, owner)

    async def aclose(self) -> None:
        """Stop every server (stdio servers exit or are killed with their children); safe twice."""
        owner, self._owner = self._owner, None
        if owner is None:
            return
        try:
            with anyio.CancelScope(shield=True):
                async with anyio.create_task_group() as stopping:
                    for connection in self.connections.values():
                        stopping.start_soon(connection.stop)
        finally:
            if self._closing is not None:
                self._closing.set()
            try:
                await owner
            except Exception:
                logger.exception("the MCP servers' task group failed while stopping")
            self._group = None

    def get(self, name: str) -> McpConnection | None:
        """The connection of server `name`, or None."""
        return self.connections.get(name)

    def status(self) -> list[dict[str, Any]]:
        """Every server's status (`McpConnection.status`), by name."""
        return [self.connections[name].status() for name in sorted(self.connections)]

    async def restart(self, name: str) -> bool:
        """Restart server `name` now; False when there is none."""
        connection = self.connections.get(name)
        if connection is None:
            return False
        await connection.restart()
        return True

    async def set_enabled(self, name: str, enabled: bool) -> bool:
        """Enable or disable server `name` for this run (the config file is not changed); False when there is none."""
        connection = self.connections.get(name)
        if connection is None:
            return False
        await connection.set_enabled(enabled)
        return True
