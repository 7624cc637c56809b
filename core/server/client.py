"""What an out-of-process plugin uses to offer tools to a hookchat bot: a small callback server in its own process,
registration with the bot's tool registry, and re-registration whenever the registry comes back (restarted, or
lost the tools), found by a periodic `GET /api/tools` that compares the registry's boot id and tool list.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import inspect
import json
import logging
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.server._http import EmbeddedServer, HTTPProblem, problem_response, read_json_body
from core.utils.tool_utils import EMPTY_PARAMETERS, validate_tool_rules

__all__ = ["ToolRegistryClient", "RemoteTool"]

logger = logging.getLogger("hookchat.server.client")

F = TypeVar("F", bound=Callable[..., Any])
_SOURCE_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")


@dataclass
class RemoteTool:
    """A tool this process offers: the handler is called with the model's arguments as keyword arguments."""

    name: str
    handler: Callable[..., Any]
    description: str = ""
    parameters: dict[str, Any] | None = None
    timeout: float = 30.0
    role: str | None = None


def _shape(value: Any) -> dict[str, Any]:
    """A handler's return value as the `{"output", "is_error"}` reply (a reply-shaped dict passes through)."""
    if isinstance(value, dict) and "is_error" in value and ("output" in value or "error" in value):
        reply = {"output": value.get("output"), "is_error": bool(value.get("is_error"))}
        if value.get("error"):
            reply["error"] = str(value["error"])
    else:
        reply = {"output": value, "is_error": False}
    try:
        json.dumps(reply)
    except (TypeError, ValueError):
        return {"output": None, "is_error": True, "error": "the tool returned a value that is not JSON-serialisable"}
    return reply


class ToolRegistryClient:
    """Offers tools of this process to the bot at `registry_url` and keeps them registered.

        client = ToolRegistryClient("http://127.0.0.1:8765", source="my-tools", token=os.environ["TOKEN"])

        @client.tool("shout", "Upper-case a text", {"type": "object", "properties": {"text": {"type": "string"}}})
        async def shout(*, text: str) -> str:
            return text.upper()

        await client.start()   # or: asyncio.run(client.serve_forever())

    `start()` serves the callbacks on `callback_host:callback_port` (0: a free port) and registers every tool;
    the registry being down is not an error: a check every `probe_interval` seconds registers the tools again
    when the registry answers with another boot id, misses one of them, lists an old callback URL, or marks one
    unavailable. Callbacks must carry the registry's token (`Authorization: Bearer`), which the registry sends.
    `stop()` clears this source's tools from the registry (best effort) and stops the server.
    """

    def __init__(
        self,
        registry_url: str,
        *,
        source: str,
        token: str | None = None,
        token_env: str = "HOOKCHAT_SERVER_TOKEN",
        callback_host: str = "127.0.0.1",
        callback_port: int = 0,
        probe_interval: float = 2.0,
        request_timeout: float = 5.0,
        max_body_bytes: int = 1024 * 1024,
    ) -> None:
        if not _SOURCE_RE.fullmatch(source):
            raise ValueError(f"source {source!r} is invalid: use 1 to 128 characters from A-Z a-z 0-9 _ . : -")
        self.registry_url = registry_url.rstrip("/")
        self.source = source
        self.token = token if token is not None else (os.environ.get(token_env) or None)
        self.probe_interval = probe_interval
        self.request_timeout = request_timeout
        self.max_body_bytes = max_body_bytes
        self.boot_id: str | None = None
        self.registered = False
        self._tools: dict[str, RemoteTool] = {}
        self._server = EmbeddedServer(self._callback_app(), callback_host, callback_port, name="tool callbacks")
        self._http: httpx.AsyncClient | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._registered_event: asyncio.Event | None = None
        self._sync_lock: asyncio.Lock | None = None

    # -- tools -----------------------------------------------------------------------------------------------------

    def add_tool(self, name: str, handler: Callable[..., Any], *, description: str = "",
                 parameters: dict[str, Any] | None = None, timeout: float = 30.0, role: str | None = None) -> None:
        """Offer `handler` as tool `name` (the same rules as every tool: name, timeout at most 300 s, schema).
        Tools added after `start()` are registered by the next check."""
        schema = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
        validate_tool_rules(name, timeout, schema, where=f"ToolRegistryClient {self.source!r}")
        self._tools[name] = RemoteTool(name, handler, description, schema, float(timeout), role)

    def tool(self, name: str | None = None, description: str = "", parameters: dict[str, Any] | None = None, *,
             timeout: float = 30.0, role: str | None = None) -> Callable[[F], F]:
        """Decorator form of `add_tool`; the name defaults to the function's name."""

        def decorate(fn: F) -> F:
            self.add_tool(name or fn.__name__, fn, description=description, parameters=parameters,
                          timeout=timeout, role=role)
            return fn

        return decorate

    async def remove_tool(self, name: str) -> bool:
        """Stop offering tool `name` and unregister it (best effort); False when there was no such tool."""
        if self._tools.pop(name, None) is None:
            return False
        if self._http is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self._post("/api/tools/unregister", {"name": name, "source": self.source})
        return True

    def callback_url(self, name: str) -> str:
        """The URL the registry calls for tool `name`."""
        return f"{self._server.url}/tools/{name}"

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the callbacks, register the tools (if the registry answers), and keep them registered."""
        if self._watch_task is not None:
            return
        self._registered_event = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(trust_env=False, timeout=self.request_timeout)
        await self._server.start()
        await self.sync()
        self._watch_task = asyncio.get_running_loop().create_task(self._watch(), name="hookchat:tool-client")

    async def stop(self, *, unregister: bool = True) -> None:
        """Stop re-registering; clear this source's tools from the registry (best effort); stop the server."""
        task, self._watch_task = self._watch_task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if unregister and self._http is not None:
            try:
                await self._post("/api/tools/clear", {"source": self.source, "role": None})
            except httpx.HTTPError as exc:
                logger.warning("could not clear tools of %r from the registry: %s", self.source, type(exc).__name__)
        await self._server.stop()
        if self._http is not None:
            await self._http.aclose()
            self._http = None
        self.registered = False

    async def __aenter__(self) -> ToolRegistryClient:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

    async def serve_forever(self) -> None:
        """Start, then run until cancelled (Ctrl-C in `asyncio.run`), then stop."""
        await self.start()
        try:
            await asyncio.Event().wait()
        finally:
            await self.stop()

    async def wait_registered(self, timeout: float) -> bool:
        """Wait at most `timeout` seconds until every tool is registered; True when they are."""
        assert self._registered_event is not None, "call start() first"
        with anyio.move_on_after(timeout):
            await self._registered_event.wait()
        return self.registered

    # -- keeping the registry in sync --------------------------------------------------------------------------------

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        assert self._http is not None
        return await self._http.post(self.registry_url + path, json=body, headers=self._auth())

    def _set_registered(self, value: bool) -> None:
        self.registered = value
        if self._registered_event is not None:
            if value:
                self._registered_event.set()
            else:
                self._registered_event.clear()

    async def sync(self) -> bool:
        """One check: ask the registry for this source's tools and register them again if anything is off.
        Returns True when every tool is registered."""
        assert self._http is not None and self._sync_lock is not None, "call start() first"
        async with self._sync_lock:
            try:
                response = await self._http.get(self.registry_url + "/api/tools", params={"source": self.source},
                                                headers=self._auth())
            except httpx.HTTPError as exc:
                if self.registered:
                    logger.warning("tool registry at %s unreachable (%s); will register again when it is back",
                                   self.registry_url, type(exc).__name__)
                self._set_registered(False)
                return False
            if response.status_code != 200:
                logger.warning("tool registry refused the check: HTTP %d %s", response.status_code,
                               _error_of(response))
                self._set_registered(False)
                return False
            data = response.json()
            listed = {t.get("name"): t for t in data.get("tools", []) if t.get("source") == self.source}
            stale = data.get("boot_id") != self.boot_id or any(
                name not in listed or listed[name].get("callback_url") != self.callback_url(name)
                or not listed[name].get("available", True) for name in self._tools
            )
            if stale:
                return await self._register_all(data.get("boot_id"))
            self._set_registered(True)
            return True

    async def _register_all(self, boot_id: str | None) -> bool:
        ok = True
        for tool in list(self._tools.values()):
            body = {"name": tool.name, "description": tool.description, "parameters": tool.parameters,
                    "callback_url": self.callback_url(tool.name), "role": tool.role, "source": self.source,
                    "timeout_seconds": tool.timeout}
            try:
                response = await self._post("/api/tools/register", body)
            except httpx.HTTPError as exc:
                logger.warning("registering tool %r failed: %s", tool.name, type(exc).__name__)
                ok = False
                break
            if response.status_code != 200:
                logger.error("the registry refused tool %r: HTTP %d %s", tool.name, response.status_code,
                             _error_of(response))
                ok = False
                continue
            boot_id = response.json().get("boot_id", boot_id)
        if ok:
            self.boot_id = boot_id
            logger.info("%d tool(s) of %r registered with %s", len(self._tools), self.source, self.registry_url)
        self._set_registered(ok)
        return ok

    async def _watch(self) -> None:
        while True:
            await asyncio.sleep(self.probe_interval)
            try:
                await self.sync()
            except Exception:
                logger.exception("checking the tool registry failed")

    # -- the callback server -------------------------------------------------------------------------------------------

    def _callback_app(self) -> Starlette:
        async def call(request: Request) -> JSONResponse:
            name = request.path_params["name"]
            try:
                self._check_caller(request)
                body = await read_json_body(request, self.max_body_bytes)
            except HTTPProblem as problem:
                return problem_response(problem)
            tool = self._tools.get(name)
            if tool is None:
                return JSONResponse({"output": None, "is_error": True, "error": f"no tool {name!r} here"},
                                    status_code=404)
            arguments = body.get("arguments") if isinstance(body, dict) else None
            if not isinstance(arguments, dict):
                return JSONResponse({"output": None, "is_error": True, "error": "arguments must be a JSON object"},
                                    status_code=400)
            return JSONResponse(await self._run(tool, arguments))

        async def probe(request: Request) -> JSONResponse:
            name = request.path_params["name"]
            if name not in self._tools:
                return JSONResponse({"ok": False, "error": f"no tool {name!r} here"}, status_code=404)
            return JSONResponse({"ok": True, "tool": name, "source": self.source})

        async def root(request: Request) -> JSONResponse:
            return JSONResponse({"ok": True, "source": self.source, "tools": sorted(self._tools)})

        return Starlette(routes=[
            Route("/tools/{name}", call, methods=["POST"]),
            Route("/tools/{name}", probe, methods=["GET"]),
            Route("/", root, methods=["GET"]),
        ])

    def _check_caller(self, request: Request) -> None:
        if not self.token:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise HTTPProblem(401, "callbacks are accepted from the tool registry only")

    async def _run(self, tool: RemoteTool, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            with anyio.fail_after(tool.timeout):
                if inspect.iscoroutinefunction(tool.handler):
                    value = await tool.handler(**arguments)
                else:
                    value = await anyio.to_thread.run_sync(lambda: tool.handler(**arguments))
                    if inspect.isawaitable(value):
                        value = await value
        except TimeoutError:
            return {"output": None, "is_error": True, "error": f"the tool did not finish within {tool.timeout:g} s"}
        except Exception as exc:  # noqa: BLE001 - the model sees the failure as the tool's error
            logger.exception("tool %r raised", tool.name)
            return {"output": None, "is_error": True, "error": f"{type(exc).__name__}: {exc}"}
        return _shape(value)


def _error_of(response: httpx.Response) -> str:
    try:
        return str(response.json().get("error", ""))
    except ValueError:
        return ""
