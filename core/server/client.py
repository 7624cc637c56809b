"""What an out-of-process plugin uses to offer tools to a hookchat bot: a small callback server in its own process,
registration with the bot's tool registry, and re-registration whenever the registry comes back (restarted, or
lost the tools), found by a periodic `GET /api/tools` that compares the registry's boot id and tool list.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import anyio
import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.server._http import (
    EmbeddedServer,
    HTTPProblem,
    check_signature,
    problem_response,
    read_json_body,
)
from core.server.registry import SOURCE_RE
from core.services import check_role
from core.utils.log import get_logger
from core.utils.tasks import call_handler, cancel_and_wait
from core.utils.tool_utils import EMPTY_PARAMETERS, validate_tool_rules

__all__ = ["ToolRegistryClient", "RemoteTool"]

logger = get_logger("server.client")

F = TypeVar("F", bound=Callable[..., Any])


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

    The registry's token is required (`token=`, else the variable named by `token_env`): without it the client
    could never register, and could not tell the registry's calls from anyone else's.

    `start()` serves the callbacks on `callback_host:callback_port` (0: a free port) and registers every tool;
    the registry being down (or answering something that is not the registry's JSON) is not an error: a check
    every `probe_interval` seconds registers the tools again when the registry answers with another boot id,
    misses one of them, lists an old callback URL, marks one unavailable, or still lists a tool of this source
    that this client no longer offers (that one is unregistered). A tool the registry refuses is logged once and
    listed in `refused`; it is tried again when the registry restarts or the tool is added again. Callbacks must
    carry `X-Hookchat-Signature` (HMAC-SHA256 of the source keyed with the token), which the registry sends.
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
        if not isinstance(source, str) or not SOURCE_RE.fullmatch(source):
            raise ValueError(f"source {source!r} is invalid: use 1 to 128 characters from A-Z a-z 0-9 _ . : -")
        token = token if token is not None else os.environ.get(token_env)
        if not token:
            raise ValueError(
                f"ToolRegistryClient {source!r} needs the registry's token: pass token=, or set "
                f"the variable {token_env}"
            )
        self.registry_url = registry_url.rstrip("/")
        self.source = source
        self.token: str = token
        self.probe_interval = probe_interval
        self.request_timeout = request_timeout
        self.max_body_bytes = max_body_bytes
        self.boot_id: str | None = None
        self.registered = False
        self.refused: dict[str, str] = {}  # tool name -> why the registry refused it (until it restarts)
        self._tools: dict[str, RemoteTool] = {}
        self._server = EmbeddedServer(self._callback_app(), callback_host, callback_port, name="tool callbacks")
        self._http: httpx.AsyncClient | None = None
        self._watch_task: asyncio.Task[None] | None = None
        self._registered_event: asyncio.Event | None = None
        self._sync_lock: asyncio.Lock | None = None

    # -- tools -----------------------------------------------------------------------------------------------------

    def add_tool(
        self,
        name: str,
        handler: Callable[..., Any],
        *,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        timeout: float = 30.0,
        role: str | None = None,
    ) -> None:
        """Offer `handler` as tool `name` (the same rules as every tool: name, timeout at most 300 s, schema).
        Tools added after `start()` are registered by the next check."""
        schema = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
        where = f"ToolRegistryClient {self.source!r}"
        validate_tool_rules(name, timeout, schema, where=where)
        check_role(role, name, where)
        self._tools[name] = RemoteTool(name, handler, description, schema, float(timeout), role)
        self.refused.pop(name, None)

    def tool(
        self,
        name: str | None = None,
        description: str = "",
        parameters: dict[str, Any] | None = None,
        *,
        timeout: float = 30.0,
        role: str | None = None,
    ) -> Callable[[F], F]:
        """Decorator form of `add_tool`; the name defaults to the function's name."""

        def decorate(fn: F) -> F:
            self.add_tool(
                name or fn.__name__, fn, description=description, parameters=parameters, timeout=timeout, role=role
            )
            return fn

        return decorate

    async def remove_tool(self, name: str) -> bool:
        """Stop offering tool `name` and unregister it (best effort); False when there was no such tool."""
        self.refused.pop(name, None)
        if self._tools.pop(name, None) is None:
            return False
        if self._http is not None:
            with contextlib.suppress(httpx.HTTPError):
                await self._post("/api/tools/unregister", {"name": name, "source": self.source})
        return True

    @property
    def serving(self) -> bool:
        """True while the callback server runs (between `start()` and `stop()`)."""
        return self._server.running

    def callback_url(self, name: str) -> str:
        """The URL the registry calls for tool `name`."""
        return f"{self._server.url}/tools/{name}"

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Serve the callbacks, register the tools (if the registry answers), and keep them registered. If it
        fails (the callback port is taken, or it is cancelled), nothing it started is left running."""
        if self._watch_task is not None:
            return
        self._registered_event = asyncio.Event()
        self._sync_lock = asyncio.Lock()
        self._http = httpx.AsyncClient(trust_env=False, timeout=self.request_timeout)
        try:
            await self._server.start()
            await self.sync()
        except BaseException:
            await self._close_transport()
            raise
        self._watch_task = asyncio.get_running_loop().create_task(self._watch(), name="hookchat:tool-client")

    async def stop(self, *, unregister: bool = True) -> None:
        """Stop re-registering; clear this source's tools from the registry (best effort); stop the server. If the
        caller is cancelled meanwhile, the server and HTTP client are still closed, then `CancelledError`
        propagates."""
        task, self._watch_task = self._watch_task, None
        try:
            await cancel_and_wait(task)
            if unregister and self._http is not None:
                try:
                    await self._post("/api/tools/clear", {"source": self.source, "role": None})
                except httpx.HTTPError as exc:
                    logger.warning("could not clear tools of %r from the registry: %s", self.source, type(exc).__name__)
        finally:
            await self._close_transport()

    async def _close_transport(self) -> None:
        try:
            await self._server.stop()
        finally:
            http, self._http = self._http, None
            self._set_registered(False)
            if http is not None:
                await http.aclose()

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
        return {"Authorization": f"Bearer {self.token}"}

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
                response = await self._http.get(
                    self.registry_url + "/api/tools", params={"source": self.source}, headers=self._auth()
                )
            except httpx.HTTPError as exc:
                if self.registered:
                    logger.warning(
                        "tool registry at %s unreachable (%s); will register again when it is back",
                        self.registry_url,
                        type(exc).__name__,
                    )
                self._set_registered(False)
                return False
            if response.status_code != 200:
                logger.warning("tool registry refused the check: HTTP %d %s", response.status_code, _error_of(response))
                self._set_registered(False)
                return False
            data = _json_object(response)
            if data is None or not isinstance(data.get("tools"), list):
                if self.registered:
                    logger.warning(
                        "%s does not answer like a tool registry; will register again when it does", self.registry_url
                    )
                self._set_registered(False)
                return False
            boot_id = data.get("boot_id")
            if boot_id != self.boot_id:
                self.refused.clear()  # a restarted registry may accept what it refused
            listed = {
                t["name"]: t
                for t in data["tools"]
                if isinstance(t, dict)
                and isinstance(t.get("name"), str)
                and t.get("source") == self.source
                and t.get("remote", True)
            }
            withdrawn = sorted(set(listed) - set(self._tools), key=str)
            stale = (
                boot_id != self.boot_id
                or bool(withdrawn)
                or any(
                    name not in listed
                    or listed[name].get("callback_url") != self.callback_url(name)
                    or not listed[name].get("available", True)
                    for name in self._tools
                    if name not in self.refused
                )
            )
            if stale:
                return await self._register_all(boot_id, withdrawn)
            self._set_registered(not self.refused)
            return not self.refused

    async def _register_all(self, boot_id: Any, withdrawn: list[str]) -> bool:
        """Register every tool not refused, and unregister `withdrawn` (listed, but no longer offered). The boot
        id is kept unless the registry could not be reached, so a refusal is not retried at every check."""
        try:
            for name in withdrawn:
                await self._post("/api/tools/unregister", {"name": name, "source": self.source})
            for tool in [t for t in list(self._tools.values()) if t.name not in self.refused]:
                body = {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "callback_url": self.callback_url(tool.name),
                    "role": tool.role,
                    "source": self.source,
                    "timeout_seconds": tool.timeout,
                }
                response = await self._post("/api/tools/register", body)
                if response.status_code >= 500:  # the registry failed, it did not refuse: all again next check
                    raise httpx.HTTPStatusError(
                        f"HTTP {response.status_code}", request=response.request, response=response
                    )
                if response.status_code != 200:
                    self.refused[tool.name] = f"HTTP {response.status_code} {_error_of(response)}".strip()
                    logger.error(
                        "the registry refused tool %r of %r: %s", tool.name, self.source, self.refused[tool.name]
                    )
                    continue
                boot_id = (_json_object(response) or {}).get("boot_id", boot_id)
        except httpx.HTTPError as exc:
            logger.warning("registering the tools of %r failed: %s", self.source, type(exc).__name__)
            self._set_registered(False)
            return False
        self.boot_id = boot_id
        if withdrawn:
            logger.info("tool(s) %s of %r no longer offered: unregistered", ", ".join(withdrawn), self.source)
        logger.info(
            "%d tool(s) of %r registered with %s", len(self._tools) - len(self.refused), self.source, self.registry_url
        )
        self._set_registered(not self.refused)
        return not self.refused

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
                check_signature(request, self.token, self.source)
                body = await read_json_body(request, self.max_body_bytes)
            except HTTPProblem as problem:
                return problem_response(problem)
            tool = self._tools.get(name)
            if tool is None:
                return JSONResponse(
                    {"output": None, "is_error": True, "error": f"no tool {name!r} here"}, status_code=404
                )
            arguments = body.get("arguments") if isinstance(body, dict) else None
            if not isinstance(arguments, dict):
                return JSONResponse(
                    {"output": None, "is_error": True, "error": "arguments must be a JSON object"}, status_code=400
                )
            return JSONResponse(await self._run(tool, arguments))

        async def probe(request: Request) -> JSONResponse:
            name = request.path_params["name"]
            if name not in self._tools:
                return JSONResponse({"ok": False, "error": f"no tool {name!r} here"}, status_code=404)
            return JSONResponse({"ok": True, "tool": name, "source": self.source})

        async def root(request: Request) -> JSONResponse:
            return JSONResponse({"ok": True, "source": self.source, "tools": sorted(self._tools)})

        return Starlette(
            routes=[
                Route("/tools/{name}", call, methods=["POST"]),
                Route("/tools/{name}", probe, methods=["GET"]),
                Route("/", root, methods=["GET"]),
            ]
        )

    async def _run(self, tool: RemoteTool, arguments: dict[str, Any]) -> dict[str, Any]:
        try:
            with anyio.fail_after(tool.timeout):
                value = await call_handler(tool.handler, **arguments)
        except TimeoutError:
            return {"output": None, "is_error": True, "error": f"the tool did not finish within {tool.timeout:g} s"}
        except Exception as exc:
            logger.exception("tool %r raised", tool.name)
            return {"output": None, "is_error": True, "error": f"{type(exc).__name__}: {exc}"}
        return _shape(value)


def _json_object(response: httpx.Response) -> dict[str, Any] | None:
    """The response's body when it is a JSON object, else None (an HTML proxy page, a list, invalid JSON)."""
    try:
        data = response.json()
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def _error_of(response: httpx.Response) -> str:
    return str((_json_object(response) or {}).get("error", ""))
