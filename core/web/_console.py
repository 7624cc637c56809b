"""The web console: a Starlette app over a running `HookChat` (chat, traces, hooks, plugins and their config,
logs, sessions), served by uvicorn inside the bot's own event loop."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route, WebSocketRoute
from starlette.staticfiles import StaticFiles

from core.adapter.web import WebChatAdapter
from core.app import SAVED_SETTINGS_NAME, HookChat
from core.mcp import SkillCatalog
from core.plugin import EventType, PluginConfigError
from core.reload import PluginReloader
from core.server import EmbeddedServer
from core.utils.net import is_loopback_host
from core.web._auth import ConsoleGate, stored_token
from core.web._logs import LogFilter, LogHub
from core.web._plugin_pages import PluginPages

__all__ = ["WebConsole", "WebConsoleError", "SAVED_CONFIG_NAME"]

_log = logging.getLogger("hookchat.web")
STATIC = Path(__file__).resolve().parent / "static"
#: Plugin settings saved from the console, under the data directory; read back when the console starts.
SAVED_CONFIG_NAME = SAVED_SETTINGS_NAME  # one settings store: the app reads it at start, for every command
_PIPELINE_ORDER = [e.value for e in EventType if e is not EventType.CUSTOM_EVENT]


class WebConsoleError(RuntimeError):
    """The console cannot start as configured (for example bound beyond loopback without a token)."""


class WebConsole:
    """The console of `app`. Construct it before `app.start()`: it adds the web chat adapter to the app and
    applies the plugin settings saved from the console. Then `await start()` serves `[web] host:port`; `stop()`.

    It always has a token (`.token`; `.login_url` is the address to open): `token`, else `[web] token` or the
    variable named by `[web] token_env`, else on loopback the one kept in `<data dir>/web/token` (generated at the
    first start). Bound beyond loopback it must be configured: `WebConsoleError` otherwise. `host`, `port`,
    `token` and `allowed_hosts` override `[web]` (tests use port 0: a free port, see `.port`); `reloader` is the
    hot reloader of `--reload`, whose state the console shows.
    """

    def __init__(
        self,
        app: HookChat,
        *,
        host: str | None = None,
        port: int | None = None,
        token: str | None = None,
        reloader: PluginReloader | None = None,
        allowed_hosts: list[str] | None = None,
    ) -> None:
        cfg = app.config.web
        self.app = app
        self.reloader = reloader
        self.host = host if host is not None else cfg.host
        configured = cfg.token.get_secret_value() if cfg.token is not None else os.environ.get(cfg.token_env)
        token = token or configured or None
        if token is None and not is_loopback_host(self.host):
            raise WebConsoleError(
                f"the web console is bound to {self.host}, beyond this machine: it needs a token "
                f"you chose (set the variable {cfg.token_env}, named by [web] token_env, or "
                "[web] token), or bind [web] host to 127.0.0.1"
            )
        if token is None:
            try:
                token = stored_token(Path(app.data_dir))
            except OSError as exc:
                raise WebConsoleError(
                    f"cannot keep the web console's token in {app.data_dir}: {exc} (set the "
                    f"variable {cfg.token_env}, or make [data] dir writable)"
                ) from None
        self.token: str = token
        hosts = list(allowed_hosts if allowed_hosts is not None else cfg.allowed_hosts)
        if not is_loopback_host(self.host) and self.host not in ("0.0.0.0", "::"):
            hosts.append(self.host)  # the address it is bound to is a name it is reached by
        existing = app.adapters.get("web")
        self.chat = existing if isinstance(existing, WebChatAdapter) else WebChatAdapter()
        if self.chat is not existing:
            app.add_adapter(self.chat)
        self.logs = LogHub()
        self.pages = PluginPages(app)
        self.saved_config_path = Path(app.data_dir) / SAVED_CONFIG_NAME  # the app reads it at start
        self.asgi = ConsoleGate(self._build(), self.token, hosts)
        self.http = EmbeddedServer(
            self.asgi, self.host, port if port is not None else cfg.port, name="web console", config_key="web.port"
        )

    @property
    def port(self) -> int:
        """The bound port."""
        return self.http.port

    @property
    def url(self) -> str:
        """The console's address, e.g. `http://127.0.0.1:8780`."""
        return self.http.url

    @property
    def login_url(self) -> str:
        """The address to open in a browser, with the token: `http://127.0.0.1:8780/?token=...` (the console then
        keeps the token in a cookie and drops it from the address bar)."""
        return f"{self.http.url}/?token={self.token}"

    async def start(self) -> None:
        """Collect logs and serve (starting the web chat adapter if the app is already running). Raises `OSError`
        when the address is taken."""
        if self.chat.app is None and self.app.started:
            await self.chat.start(self.app)
        self.logs.attach()
        try:
            await self.http.start()
        except BaseException:
            self.logs.detach()
            raise
        _log.info("web console on %s", self.url)

    async def stop(self) -> None:
        """Stop serving. Safe twice."""
        try:
            await self.http.stop()
        finally:
            self.logs.detach()

    async def __aenter__(self) -> WebConsole:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    # -- saved plugin settings --------------------------------------------------------------------------------------

    async def _save_config(self, plugin_id: str, values: dict[str, Any]) -> None:
        path = self.saved_config_path

        def write() -> None:
            saved: dict[str, Any] = {}
            if path.is_file():
                try:
                    saved = json.loads(path.read_text(encoding="utf-8"))
                except ValueError:
                    saved = {}
            saved[plugin_id] = values
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(saved, indent=2, ensure_ascii=False), encoding="utf-8")
            tmp.replace(path)

        await anyio.to_thread.run_sync(write)

    # -- routes -----------------------------------------------------------------------------------------------------

    def _build(self) -> Starlette:
        routes = [
            Route("/", self.index),
            Route("/api/overview", self.overview),
            Route("/api/hooks", self.hooks),
            Route("/api/plugins", self.plugins),
            Route("/api/plugins/{plugin_id}/{action:str}", self.plugin_action, methods=["POST"]),
            Route("/api/plugins/{plugin_id}/config", self.plugin_config, methods=["GET", "PUT"]),
            Route("/api/traces", self.traces),
            Route("/api/traces/{trace_id}", self.trace),
            Route("/api/logs", self.log_lines),
            Route("/api/logs/stream", self.log_stream),
            Route("/api/mcp", self.mcp),
            Route("/api/mcp/{name}/{action:str}", self.mcp_action, methods=["POST"]),
            Route("/api/sessions", self.sessions),
            Route("/api/inbox", self.inbox),
            Route("/api/sessions/{sid:path}", self.session, methods=["GET", "DELETE"]),
            WebSocketRoute("/ws/chat", self.chat.endpoint),
            Mount("/static", app=StaticFiles(directory=STATIC)),
            Mount("/page/plugin", app=self.pages.pages),
            Mount("/api/plugin", app=self.pages.apis),
        ]
        return Starlette(routes=routes)

    async def index(self, request: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def overview(self, request: Request) -> Response:
        app = self.app
        statuses = app.plugins.statuses()
        return JSONResponse(
            {
                "provider": app.provider.name,
                "plugins": {
                    "loaded": sum(s.state == "loaded" for s in statuses),
                    "error": sum(s.state == "error" for s in statuses),
                    "total": len(statuses),
                },
                "tracing": app.tracer.enabled,
                "reload": self.reloader is not None,
                "pages": self.pages.menu(),
            }
        )

    async def hooks(self, request: Request) -> Response:
        chains = self.app.plugins.hook_chains()
        order = [e for e in _PIPELINE_ORDER if e in chains] + sorted(e for e in chains if e not in _PIPELINE_ORDER)
        disabled = [s.plugin_id for s in self.app.plugins.statuses() if s.state in ("disabled", "error")]
        return JSONResponse(
            {
                "events": [{"event": e, "hooks": chains[e]} for e in order],
                "disabled": disabled,
                "default_deadline": self.app.engine.default_deadline,
            }
        )

    async def plugins(self, request: Request) -> Response:
        reloads = {e.plugin_id: e for e in self.reloader.events} if self.reloader is not None else {}
        out = []
        for status in self.app.plugins.statuses():
            item = dict(vars(status))
            item["has_config"] = self.app.plugins.config_schema(status.plugin_id) is not None
            last = reloads.get(status.plugin_id)
            item["reload"] = {"at": last.at, "ok": last.ok, "reason": last.reason} if last is not None else None
            out.append(item)
        return JSONResponse(out)

    async def plugin_action(self, request: Request) -> Response:
        plugin_id, action = request.path_params["plugin_id"], request.path_params["action"]
        manager = self.app.plugins
        if manager.status(plugin_id) is None:
            return _problem(404, f"no plugin {plugin_id!r}")
        if action == "enable":
            status = await manager.enable(plugin_id)
        elif action == "disable":
            await manager.disable(plugin_id)
            status = manager.status(plugin_id)
        elif action == "reload":
            status = await manager.reload(plugin_id)
        else:
            return _problem(404, f"unknown action {action!r}: enable, disable or reload")
        if action != "disable" and status is not None and status.state == "loaded":
            await manager.dispatch_loaded(plugin_id)
        _log.info("plugin %r: %s from the web console -> %s", plugin_id, action, status.state if status else "?")
        return JSONResponse(vars(manager.status(plugin_id)))

    async def plugin_config(self, request: Request) -> Response:
        plugin_id = request.path_params["plugin_id"]
        manager = self.app.plugins
        if manager.status(plugin_id) is None:
            return _problem(404, f"no plugin {plugin_id!r}")
        if request.method == "GET":
            values = manager.plugin_config.get(plugin_id, {})
            try:
                effective = manager.check_config(plugin_id, values)
            except PluginConfigError:
                effective = values
            return JSONResponse({"schema": manager.config_schema(plugin_id), "values": values, "cfg": effective})
        try:
            body = await request.json()
        except ValueError:
            return _problem(400, 'the body must be JSON: {"values": {...}}')
        values = body.get("values") if isinstance(body, dict) else None
        if not isinstance(values, dict):
            return _problem(400, 'the body must be {"values": {...}}')
        try:
            manager.check_config(plugin_id, values)
        except PluginConfigError as exc:
            return _problem(400, str(exc))
        status = await manager.configure(plugin_id, values)
        await self._save_config(plugin_id, values)
        _log.info("plugin %r: settings saved from the web console (%s)", plugin_id, status.state)
        return JSONResponse({"ok": True, "status": vars(status)})

    async def traces(self, request: Request) -> Response:
        kind = request.query_params.get("kind") or None
        limit = _int(request.query_params.get("limit"), 50)
        return JSONResponse([t.summary() for t in self.app.tracer.recent(limit, kind)])

    async def trace(self, request: Request) -> Response:
        trace = self.app.tracer.get(request.path_params["trace_id"])
        if trace is None:
            return _problem(404, "no such trace (only the newest ones are kept; see [trace] ring_size)")
        return JSONResponse(trace.to_dict())

    def _log_filter(self, request: Request) -> LogFilter:
        q = request.query_params
        return LogFilter(q.get("plugin", ""), q.get("level", ""), q.get("trace", ""))

    async def log_lines(self, request: Request) -> Response:
        wanted = self._log_filter(request)
        return JSONResponse(
            [e.to_dict() for e in self.logs.recent(wanted, _int(request.query_params.get("limit"), 500))]
        )

    async def log_stream(self, request: Request) -> Response:
        wanted = self._log_filter(request)

        async def events() -> AsyncIterator[str]:
            yield ": connected\n\n"
            async for entry in self.logs.follow(wanted):
                yield f"id: {entry.seq}\ndata: {json.dumps(entry.to_dict(), ensure_ascii=False)}\n\n"

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    async def mcp(self, request: Request) -> Response:
        catalog = SkillCatalog(self.app.config.skills)
        skills = await anyio.to_thread.run_sync(catalog.scan)
        return JSONResponse(
            {
                "servers": self.app.mcp.status(),
                "skills": [
                    {
                        **s.to_dict(),
                        "enabled": s.name not in catalog.config.disabled,
                        "scope": catalog.config.scope.get(s.name),
                    }
                    for s in skills
                ],
                "skill_errors": catalog.errors,
            }
        )

    async def mcp_action(self, request: Request) -> Response:
        name, action = request.path_params["name"], request.path_params["action"]
        manager = self.app.mcp
        if manager.get(name) is None:
            return _problem(404, f"no MCP server {name!r}")
        if action in ("enable", "disable"):
            await manager.set_enabled(name, action == "enable")
        elif action == "restart":
            await manager.restart(name)
        else:
            return _problem(404, f"unknown action {action!r}: enable, disable or restart")
        _log.info("MCP server %r: %s from the web console", name, action)
        return JSONResponse(manager.get(name).status())  # type: ignore[union-attr] - checked above

    async def sessions(self, request: Request) -> Response:
        history = self.app.history
        if history is None:
            return JSONResponse([])
        out = []
        for sid in await history.sessions():
            out.append({"sid": sid, "turns": len(await history.list_turns(sid))})
        return JSONResponse(out)

    async def inbox(self, request: Request) -> Response:
        """The durable inbox: how many messages wait for an answer, and those set aside as poison."""
        inbox = self.app.inbox
        if inbox is None:
            return JSONResponse({"waiting": 0, "poison": []})
        waiting, poison = await inbox.waiting(), await inbox.poisoned()
        return JSONResponse({"waiting": len(waiting), "poison": [e.summary() for e in poison]})

    async def session(self, request: Request) -> Response:
        sid = request.path_params["sid"]
        history = self.app.history
        if history is None:
            return _problem(404, "this bot keeps no history")
        if request.method == "DELETE":  # like /reset: the messages waiting for an answer go too
            removed = await self.app.reset(sid)
            _log.info("history of %s cleared from the web console (%d turns)", sid, removed)
            return JSONResponse({"ok": True, "removed": removed})
        turns = await history.list_turns(sid)
        return JSONResponse(
            {
                "sid": sid,
                "turns": [
                    {"id": t.id, "created_at": t.created_at, "messages": [m.to_dict() for m in t.messages]}
                    for t in turns
                ],
            }
        )


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status)


def _int(value: str | None, default: int) -> int:
    try:
        return max(1, min(10_000, int(value))) if value else default
    except ValueError:
        return default
