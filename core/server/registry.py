"""The registry of remote tools (seed 000): tools other processes register over HTTP, kept in SQLite so they survive
a restart of either side, offered to the model as `FunctionTool(remote=True)` owned by `remote:<source>`, and
called back over loopback HTTP when the model picks them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sqlite3
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from core.server._http import SIGNATURE_HEADER, callback_signature
from core.server._urls import LoopbackURLError, check_loopback_url, dispatch_url
from core.services import check_role, current_tool_call, remote_owner
from core.utils.sqlite import SqliteWorker
from core.utils.tool_utils import EMPTY_PARAMETERS, FunctionTool, ToolDefinitionError, validate_tool_rules

__all__ = [
    "RemoteToolRegistry",
    "RemoteToolSpec",
    "RegistrationError",
    "parse_registration",
    "DEFAULT_SOURCE",
    "MAX_REMOTE_TOOLS",
]

logger = logging.getLogger("hookchat.server.registry")

DEFAULT_SOURCE = "external"
MAX_REMOTE_TOOLS = 1024
MAX_DESCRIPTION = 8192
MAX_REPLY_BYTES = 8 * 1024 * 1024
SOURCE_RE = re.compile(r"[A-Za-z0-9_.:\-]{1,128}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS remote_tools (
    source TEXT NOT NULL,
    name TEXT NOT NULL,
    role TEXT,
    description TEXT NOT NULL,
    parameters TEXT NOT NULL,
    callback_url TEXT NOT NULL,
    timeout_seconds REAL NOT NULL,
    registered_at REAL NOT NULL,
    PRIMARY KEY (source, name)
)
"""


class RegistrationError(ValueError):
    """A registration that breaks a rule (name, timeout, schema, callback URL, source, role); the message says which."""


@dataclass
class RemoteToolSpec:
    """One remote tool as registered. `available` is False while its callback does not answer (it stays stored)."""

    name: str
    callback_url: str
    source: str = DEFAULT_SOURCE
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    role: str | None = None
    timeout_seconds: float = 30.0
    registered_at: float = field(default_factory=time.time)
    available: bool = True
    hidden_since: float = field(default_factory=time.monotonic, compare=False)  # when it was last hidden

    @property
    def owner(self) -> str:
        """The tool registry owner of this tool: `remote:<source>`."""
        return remote_owner(self.source)

    def describe(self) -> dict[str, Any]:
        """The tool as `GET /api/tools` lists it."""
        return {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "callback_url": self.callback_url,
            "role": self.role,
            "source": self.source,
            "timeout_seconds": self.timeout_seconds,
            "registered_at": self.registered_at,
            "available": self.available,
            "remote": True,
        }


def parse_registration(payload: Any) -> RemoteToolSpec:
    """Check a `POST /api/tools/register` body and build the spec; raises `RegistrationError` saying what is wrong."""
    if not isinstance(payload, dict):
        raise RegistrationError("the body must be a JSON object")
    source = payload.get("source") or DEFAULT_SOURCE
    if not isinstance(source, str) or not SOURCE_RE.fullmatch(source):
        raise RegistrationError(f"source {source!r} is invalid: use 1 to 128 characters from A-Z a-z 0-9 _ . : -")
    name = payload.get("name")
    description = payload.get("description", "")
    if not isinstance(description, str) or len(description) > MAX_DESCRIPTION:
        raise RegistrationError(f"description must be a string of at most {MAX_DESCRIPTION} characters")
    parameters = payload.get("parameters")
    if parameters is None:
        parameters = dict(EMPTY_PARAMETERS)
    timeout = payload.get("timeout_seconds", 30.0)
    if isinstance(timeout, bool):
        raise RegistrationError("timeout_seconds must be a number of seconds")
    try:
        validate_tool_rules(name, timeout, parameters, where=f"remote source {source!r}")
    except ToolDefinitionError as exc:
        raise RegistrationError(str(exc)) from None
    role = payload.get("role")
    try:
        check_role(role, name, f"remote source {source!r}")
    except ToolDefinitionError as exc:
        raise RegistrationError(str(exc)) from None
    callback_url = payload.get("callback_url")
    try:
        check_loopback_url(callback_url)
    except LoopbackURLError as exc:
        raise RegistrationError(str(exc)) from None
    assert isinstance(name, str) and isinstance(callback_url, str), "the checks above refuse anything else"
    return RemoteToolSpec(name, callback_url, source, description, parameters, role, float(timeout))


class _RemoteOwner:
    """Stands in for a plugin context on remote tools, so logs name `remote:<source>`."""

    def __init__(self, source: str) -> None:
        self.plugin_id = remote_owner(source)


def _error(message: str) -> dict[str, Any]:
    return {"output": None, "is_error": True, "error": message}


class RemoteToolRegistry:
    """Remote tools: stored in `db_path` (None: in memory only), offered through `tools` (the app's tool registry).

    Health protocol: a callback is *reachable* when `GET <callback_url>` gets any HTTP answer other than 404 or
    410 within `probe_timeout`. On `open()` every stored tool is probed; unreachable ones stay stored but hidden
    from the model until `recheck()` (the server runs it periodically) finds them reachable, or their process
    registers them again. A call refused at connection also hides the tool. A tool hidden for `forget_after`
    seconds of this registry's run is forgotten (deleted from the store too).

    Callbacks never receive the registry's token (`token()`): a call carries `X-Hookchat-Signature`, the
    HMAC-SHA256 of the tool's source keyed with the token (`callback_signature`), so the tool's process can tell
    the registry from other local processes; probes carry nothing.
    """

    def __init__(
        self,
        tools: Any,
        db_path: Path | None = None,
        *,
        token: Callable[[], str | None] | None = None,
        probe_timeout: float = 2.0,
        forget_after: float = 24 * 3600.0,
    ) -> None:
        self.tools = tools
        self.db_path = Path(db_path) if db_path is not None else None
        self.token = token or (lambda: None)
        self.probe_timeout = probe_timeout
        self.forget_after = forget_after
        self.boot_id = uuid.uuid4().hex
        self._specs: dict[tuple[str, str], RemoteToolSpec] = {}
        self._store: SqliteWorker | None = None
        self._client: httpx.AsyncClient | None = None
        self._open = False

    @property
    def is_open(self) -> bool:
        """True between `open()` and `close()`."""
        return self._open

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Load the stored registrations, probe their callbacks, and offer the reachable ones to the model."""
        if self._open:
            return
        self._client = httpx.AsyncClient(trust_env=False, follow_redirects=False)
        if self.db_path is not None:
            self._store = SqliteWorker(self.db_path, name="tool registry", setup=lambda conn: conn.execute(_SCHEMA))
            rows = await self._store.submit(
                lambda conn: conn.execute(
                    "SELECT source, name, role, description, parameters, callback_url, timeout_seconds, registered_at "
                    "FROM remote_tools ORDER BY registered_at"
                ).fetchall()
            )
            for source, name, role, description, parameters, url, timeout, at in rows:
                try:
                    spec = RemoteToolSpec(name, url, source, description, json.loads(parameters), role, timeout, at)
                    parse_registration({**spec.describe()})  # stored rows obey today's rules too
                except (RegistrationError, ValueError) as exc:
                    logger.warning("stored remote tool %r of %r ignored: %s", name, source, exc)
                    continue
                spec.available = False
                self._specs[(source, name)] = spec
        self._open = True
        restored = await self.recheck()
        if self._specs:
            logger.info("tool registry: %d stored remote tool(s), %d reachable", len(self._specs), restored)

    async def close(self) -> None:
        """Withdraw every remote tool from the model (they stay stored), then close the database and client."""
        if not self._open:
            return
        self._open = False
        for spec in self._specs.values():
            self._withdraw(spec)
        self._specs.clear()
        if self._store is not None:
            await self._store.close()
            self._store = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- registration ------------------------------------------------------------------------------------------------

    async def register(self, payload: Any) -> RemoteToolSpec:
        """Register (or replace, by source and name) a remote tool from a registration body; it is offered at once."""
        spec = parse_registration(payload)
        key = (spec.source, spec.name)
        if key not in self._specs and len(self._specs) >= MAX_REMOTE_TOOLS:
            raise RegistrationError(f"the registry holds {MAX_REMOTE_TOOLS} remote tools already")
        if self._store is not None:
            row = (
                spec.source,
                spec.name,
                spec.role,
                spec.description,
                json.dumps(spec.parameters),
                spec.callback_url,
                spec.timeout_seconds,
                spec.registered_at,
            )

            def save(conn: sqlite3.Connection) -> None:
                with conn:
                    conn.execute("INSERT OR REPLACE INTO remote_tools VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row)

            await self._store.submit(save)
        old = self._specs.get(key)
        if old is not None:
            self._withdraw(old)
        self._specs[key] = spec
        self._offer(spec)
        logger.info("remote tool %r registered by %r (callback %s)", spec.name, spec.source, spec.callback_url)
        return spec

    async def unregister(self, name: str, source: str | None = None, role: str | None = None) -> int:
        """Remove the remote tool `name` (of `source` when given, of `role` when given); returns how many."""
        return await self._remove(
            [
                s
                for s in self._specs.values()
                if s.name == name and (source is None or s.source == source) and (role is None or s.role == role)
            ]
        )

    async def clear(self, source: str, role: str | None = None) -> int:
        """Remove every remote tool of `source` (only those of `role` when given); returns how many."""
        removed = await self._remove(
            [s for s in self._specs.values() if s.source == source and (role is None or s.role == role)]
        )
        if role is None:  # also whatever an earlier run left in the tool registry under this owner
            self.tools.remove_owner(remote_owner(source))
        return removed

    async def _remove(self, specs: list[RemoteToolSpec]) -> int:
        if not specs:
            return 0
        if self._store is not None:
            keys = [(s.source, s.name) for s in specs]

            def delete(conn: sqlite3.Connection) -> None:
                with conn:
                    conn.executemany("DELETE FROM remote_tools WHERE source = ? AND name = ?", keys)

            await self._store.submit(delete)
        for spec in specs:
            self._withdraw(spec)
            self._specs.pop((spec.source, spec.name), None)
        return len(specs)

    def list(self, source: str | None = None) -> list[dict[str, Any]]:
        """Every remote tool (hidden ones with `available: false`), of `source` when given, by source and name."""
        return [s.describe() for _, s in sorted(self._specs.items()) if source is None or s.source == source]

    def get(self, source: str, name: str) -> RemoteToolSpec | None:
        """The remote tool `name` of `source`, or None."""
        return self._specs.get((source, name))

    # -- health ----------------------------------------------------------------------------------------------------

    async def probe(self, spec: RemoteToolSpec) -> bool:
        """Whether the tool's callback answers (see the class for the protocol)."""
        if self._client is None:
            return False
        try:
            response = await self._client.get(dispatch_url(spec.callback_url), timeout=self.probe_timeout)
        except (httpx.HTTPError, LoopbackURLError):
            return False
        return response.status_code not in (404, 410)

    async def recheck(self) -> int:
        """Probe every hidden tool and offer those that answer again; forget those hidden for `forget_after`
        seconds. Returns how many came back."""
        hidden = [s for s in self._specs.values() if not s.available]
        if not hidden:
            return 0
        answers = await asyncio.gather(*(self.probe(s) for s in hidden))
        back = 0
        forgotten = []
        for spec, reachable in zip(hidden, answers, strict=True):
            if self._specs.get((spec.source, spec.name)) is not spec:
                continue
            if reachable:
                self._offer(spec)
                back += 1
            elif time.monotonic() - spec.hidden_since >= self.forget_after:
                forgotten.append(spec)
        if forgotten:
            logger.warning(
                "forgetting %d remote tool(s) unreachable for %g s: %s",
                len(forgotten),
                self.forget_after,
                ", ".join(f"{s.source}/{s.name}" for s in forgotten),
            )
            await self._remove(forgotten)
        return back

    # -- the tools the model sees ------------------------------------------------------------------------------------

    def _offer(self, spec: RemoteToolSpec) -> None:
        async def call_remote(**arguments: Any) -> dict[str, Any]:
            return await self.dispatch(spec, arguments)

        tool = FunctionTool(
            spec.name,
            spec.description,
            spec.parameters,
            call_remote,
            timeout=spec.timeout_seconds,
            role=spec.role,
            ctx=_RemoteOwner(spec.source),
            pass_event=False,
            remote=True,
        )
        spec.available = True
        self.tools.add(spec.name, tool, spec.owner)

    def _withdraw(self, spec: RemoteToolSpec) -> None:
        if spec.available:
            spec.available, spec.hidden_since = False, time.monotonic()
        self.tools.remove(spec.name, spec.owner)

    def _hide(self, spec: RemoteToolSpec, why: str) -> None:
        if spec.available:
            logger.warning(
                "remote tool %r of %r hidden until its callback answers again: %s", spec.name, spec.source, why
            )
            self._withdraw(spec)

    def _signed(self, spec: RemoteToolSpec) -> dict[str, str]:
        token = self.token()
        return {SIGNATURE_HEADER: callback_signature(token, spec.source)} if token else {}

    async def dispatch(self, spec: RemoteToolSpec, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call the tool back: POST `{"name", "arguments", "call_id", "raw_arguments"}`, expect
        `{"output", "is_error"}`. Every failure (refused, timeout, HTTP error, malformed reply) becomes
        `{"output": None, "is_error": True, "error": ...}`, which the model sees as the tool's error."""
        if self._client is None:
            return _error(f"the tool registry is closed, so {spec.name} cannot be called")
        call = current_tool_call.get()
        if call is not None and call.name == spec.name:
            call_id, raw = call.id, call.raw_arguments
        else:
            call_id, raw = f"call_{uuid.uuid4().hex[:16]}", json.dumps(arguments, ensure_ascii=False)
        body = {"name": spec.name, "arguments": arguments, "call_id": call_id, "raw_arguments": raw}
        received = bytearray()
        try:
            async with self._client.stream(
                "POST",
                dispatch_url(spec.callback_url),
                json=body,
                headers=self._signed(spec),
                timeout=spec.timeout_seconds,
            ) as response:
                status = response.status_code
                async for chunk in response.aiter_bytes():
                    received += chunk
                    if len(received) > MAX_REPLY_BYTES:
                        return _error(f"the tool's reply is over {MAX_REPLY_BYTES // (1024 * 1024)} MiB")
        except httpx.ConnectError:
            self._hide(spec, "connection refused")
            return _error(f"the tool {spec.name} is unreachable (its process is not answering); try again later")
        except httpx.TimeoutException:
            return _error(f"the tool {spec.name} did not answer within {spec.timeout_seconds:g} s")
        except httpx.HTTPError as exc:
            return _error(f"calling the tool {spec.name} failed ({type(exc).__name__})")
        if not 200 <= status < 300:
            if status in (404, 410):
                self._hide(spec, f"its callback answered HTTP {status}")
            return _error(f"the tool {spec.name} answered HTTP {status}")
        try:
            reply = json.loads(bytes(received))
        except ValueError:
            reply = None
        if (
            not isinstance(reply, dict)
            or not ("output" in reply or "is_error" in reply)
            or not isinstance(reply.get("is_error", False), bool)
        ):
            return _error(
                f"the tool {spec.name} answered with something other than a JSON object "
                '{"output": ..., "is_error": true|false}'
            )
        error = reply.get("error")
        return {
            "output": reply.get("output"),
            "is_error": reply.get("is_error", False),
            "error": error if isinstance(error, str) else None,
        }
