"""The framework's HTTP server: the tool registry API on `[server] host:port`, its SQLite store in the data
directory, and the task that re-checks hidden remote tools. `HookChat` starts it for `hookchat run`.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from core.config import ServerConfig
from core.server._http import EmbeddedServer
from core.server.registry import RemoteToolRegistry
from core.server.routes import build_registry_app
from core.utils.log import get_logger
from core.utils.net import InsecureListenerError, is_loopback_host
from core.utils.registry import OwnedRegistry
from core.utils.tasks import cancel_and_wait
from core.utils.tool_utils import BaseTool

__all__ = ["ToolRegistryServer", "configured_token", "REGISTRY_DB_NAME"]

logger = get_logger("server")

REGISTRY_DB_NAME = "tool_registry.sqlite3"


def configured_token(server_config: ServerConfig) -> str | None:
    """The registry's bearer token: `[server] token`, else the environment variable named by `token_env`;
    None (registration refused) when neither is set or it is empty."""
    if server_config.token is not None and server_config.token.get_secret_value():
        return server_config.token.get_secret_value()
    return os.environ.get(server_config.token_env) or None


class ToolRegistryServer:
    """Serves the tool registry over `tools` (the app's registry) with the `[server]` settings `config`, storing
    registrations in `data_dir`: `await start()` binds `[server] host:port` (port 0: a free
    one, see `.port`), loads and probes stored remote tools; `await stop()` withdraws them and closes.

    `host`, `port`, `token` and `db_path` override the config (tests); `recheck_interval` is how often hidden
    remote tools are probed again.
    """

    def __init__(
        self,
        config: ServerConfig,
        tools: OwnedRegistry[BaseTool],
        data_dir: Path,
        *,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        db_path: Path | None = None,
        recheck_interval: float = 5.0,
        probe_timeout: float = 2.0,
    ) -> None:
        cfg = self.config = config
        self.host = host if host is not None else cfg.host
        self.max_body_bytes = cfg.max_body_bytes
        self._token = token if token is not None else configured_token(cfg)
        self.recheck_interval = recheck_interval
        self.registry = RemoteToolRegistry(
            tools,
            db_path if db_path is not None else Path(data_dir) / REGISTRY_DB_NAME,
            token=lambda: self._token,
            probe_timeout=probe_timeout,
        )
        asgi = build_registry_app(self.registry, token=lambda: self._token, max_body_bytes=self.max_body_bytes)
        self.http = EmbeddedServer(
            asgi, self.host, port if port is not None else cfg.port, name="tool registry", config_key="server.port"
        )
        self._recheck_task: asyncio.Task[None] | None = None

    @property
    def port(self) -> int:
        """The bound port (the configured one, or the one chosen for port 0)."""
        return self.http.port

    @property
    def url(self) -> str:
        """The registry's base URL, e.g. `http://127.0.0.1:8765`."""
        return self.http.url

    @property
    def running(self) -> bool:
        """True while the HTTP server runs."""
        return self.http.running

    async def start(self) -> None:
        """Open the registry (stored tools come back when reachable), then serve. Raises `OSError` when the
        address is taken, `InsecureListenerError` when bound beyond loopback without a token (on loopback it starts
        and refuses every request but `/api/health`)."""
        if self.running:
            return
        if self._token is None and not is_loopback_host(self.host):
            raise InsecureListenerError(
                f"the tool registry is bound to {self.host}, beyond this machine, without a token: set the variable "
                f"{self.config.token_env} (named by [server] token_env) or [server] token, or bind [server] host to "
                "127.0.0.1"
            )
        if self._token is None:
            logger.warning(
                "tool registry: no token configured, so every registration will be refused (set %s)",
                self.config.token_env,
            )
        await self.registry.open()
        try:
            await self.http.start()
        except BaseException:
            await self.registry.close()
            raise
        self._recheck_task = asyncio.get_running_loop().create_task(
            self._recheck_loop(), name="hookchat:tool-registry-recheck"
        )

    async def stop(self) -> None:
        """Stop serving and re-checking, withdraw remote tools from the model (they stay stored). Safe twice. If
        the caller is cancelled meanwhile, the rest is still stopped, then `CancelledError` propagates."""
        task, self._recheck_task = self._recheck_task, None
        try:
            await cancel_and_wait(task)
        finally:
            try:
                await self.http.stop()
            finally:
                await self.registry.close()

    async def _recheck_loop(self) -> None:
        while True:
            await asyncio.sleep(self.recheck_interval)
            try:
                await self.registry.recheck()
            except Exception:
                logger.exception("tool registry: re-checking hidden tools failed")
