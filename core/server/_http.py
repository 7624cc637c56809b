"""An ASGI app served by uvicorn inside the running event loop (the registry, and a client's callback server), and
the request helpers both use: a JSON body read with a size limit enforced while reading, the registry's bearer
token check, and the per-source signature the registry puts on callbacks instead of its token.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import hmac
import json
import socket
from collections.abc import Iterator
from typing import Any

import uvicorn
from starlette.requests import Request
from starlette.responses import JSONResponse

from core.utils.log import get_logger
from core.utils.nesting import NestingError, loads_bounded
from core.utils.tasks import cancel_and_wait
from core.utils.text import valid_text

__all__ = [
    "EmbeddedServer",
    "HTTPProblem",
    "SIGNATURE_HEADER",
    "callback_signature",
    "check_bearer",
    "check_signature",
    "problem_response",
    "read_json_body",
]

logger = get_logger("server")

#: The header carrying `callback_signature(token, source)` on every call-back the registry makes.
SIGNATURE_HEADER = "X-Hookchat-Signature"


class HTTPProblem(Exception):
    """A request the server refuses: `status` and a message for the `{"ok": false, "error": ...}` body."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def problem_response(problem: HTTPProblem) -> JSONResponse:
    """The JSON response of a refused request."""
    headers = {"WWW-Authenticate": "Bearer"} if problem.status == 401 else None
    return JSONResponse({"ok": False, "error": problem.message}, status_code=problem.status, headers=headers)


async def read_json_body(request: Request, limit: int) -> Any:
    """The request's JSON body. Refuses (413) a body over `limit` bytes, by its Content-Length or while it is read,
    so an oversize body is never held in memory; 400 for a body that is not JSON."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise HTTPProblem(413, f"request body over {limit} bytes")
        except ValueError:
            raise HTTPProblem(400, "invalid Content-Length") from None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise HTTPProblem(413, f"request body over {limit} bytes")
        chunks.append(chunk)
    try:
        text = (b"".join(chunks) or b"null").decode("utf-8")
        payload = loads_bounded(text, MAX_BODY_DEPTH)
    except NestingError as exc:
        raise HTTPProblem(400, f"the request body is not valid JSON (or is nested too deeply): {exc}") from None
    except ValueError:
        raise HTTPProblem(400, "the request body is not valid JSON (or is nested too deeply)") from None
    if "\\u" in text:  # a `\\ud83d` escape decodes to a lone surrogate, which nothing can store or send
        dumped = json.dumps(payload, ensure_ascii=False)
        if valid_text(dumped) is not dumped:
            payload = json.loads(valid_text(dumped))
    return payload


#: How deep a request body's JSON may nest: a tool's parameters schema needs a handful of levels, and recursion
#: over a deeper one (schema checks, validation) would run out of stack.
MAX_BODY_DEPTH = 32


def _same_secret(given: str, expected: str) -> bool:
    return bool(given) and hmac.compare_digest(given.encode(), expected.encode())


def check_bearer(request: Request, expected: str | None, *, what: str = "this endpoint") -> None:
    """Require `Authorization: Bearer <expected>` (compared in constant time). With no `expected` token configured
    the request is refused with 403 — never let through."""
    if not expected:
        raise HTTPProblem(
            403,
            f"{what} is disabled: no token is configured (set the variable named by "
            "[server] token_env, default HOOKCHAT_SERVER_TOKEN)",
        )
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not _same_secret(token.strip(), expected):
        raise HTTPProblem(401, "missing or wrong bearer token (Authorization: Bearer <token>)")


def callback_signature(token: str, source: str) -> str:
    """What the registry sends in `X-Hookchat-Signature` when it calls back a tool of `source`: HMAC-SHA256 of the
    source, keyed with the registry token, in hex. Whoever knows the token can check it; whoever receives it learns
    neither the token nor a value valid for another source."""
    return hmac.new(token.encode(), source.encode(), hashlib.sha256).hexdigest()


def check_signature(request: Request, token: str, source: str) -> None:
    """Require `X-Hookchat-Signature: callback_signature(token, source)` (constant time); 401 otherwise."""
    if not _same_secret(request.headers.get(SIGNATURE_HEADER, "").strip(), callback_signature(token, source)):
        raise HTTPProblem(401, f"callbacks are accepted from the tool registry only ({SIGNATURE_HEADER})")


class _EmbeddedUvicorn(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        # Embedded: the host application owns SIGINT/SIGTERM, not this server.
        yield


class ListenError(OSError):
    """A server cannot listen on its address (taken, or not this machine's); the message names the address and
    the config key that sets it."""


class EmbeddedServer:
    """Serves `asgi_app` on `host:port` (0: a free port) from a task of the running loop; `start`/`stop`.
    `config_key` (`web.port`, `server.port`) is named when the address cannot be bound."""

    def __init__(
        self,
        asgi_app: Any,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "http",
        start_timeout: float = 10.0,
        config_key: str | None = None,
    ) -> None:
        self.asgi_app = asgi_app
        self.host = host
        self.port = port
        self.name = name
        self.config_key = config_key
        self.start_timeout = start_timeout
        self._server: _EmbeddedUvicorn | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        """True while the server task runs."""
        return self._task is not None and not self._task.done()

    @property
    def url(self) -> str:
        """The base URL, `http://host:port` (IPv6 hosts in brackets)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _bind(self) -> socket.socket:
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        # IPPROTO_TCP, not 0: asyncio sets TCP_NODELAY only on sockets that say TCP, and without it a reply of
        # several small writes (a WebSocket turn: started, message, ended) waits 40 ms for a delayed ACK.
        sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((self.host, self.port))
            sock.listen(128)
            sock.setblocking(False)
        except OSError as exc:
            sock.close()
            fix = f"set {self.config_key} to a free port" if self.config_key else "choose a free port"
            why = (
                "the port is in use (another process listens on it)"
                if exc.errno == errno.EADDRINUSE
                else (exc.strerror or str(exc))
            )
            raise ListenError(
                exc.errno, f"the {self.name} cannot listen on {self.url}: {why}; {fix} (0 picks one)"
            ) from None
        return sock

    async def start(self) -> None:
        """Bind (raising `ListenError` when the address is taken), then serve; returns once the server accepts."""
        if self.running:
            return
        sock = self._bind()
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self.asgi_app,
            http="h11",
            lifespan="off",
            log_level="warning",
            access_log=False,
            timeout_graceful_shutdown=2,
            server_header=False,
        )
        self._server = _EmbeddedUvicorn(config)
        self._task = asyncio.get_running_loop().create_task(
            self._server.serve(sockets=[sock]), name=f"hookchat:{self.name}"
        )
        try:
            async with asyncio.timeout(self.start_timeout):
                while not self._server.started:
                    if self._task.done():
                        break
                    await asyncio.sleep(0.01)
        except TimeoutError:
            await self.stop()
            raise OSError(f"{self.name} server did not start within {self.start_timeout:g} s") from None
        if self._task.done():
            exc = self._task.exception() if not self._task.cancelled() else None
            sock.close()
            raise OSError(f"{self.name} server stopped while starting: {exc!r}")
        logger.info("%s server listening on %s", self.name, self.url)

    async def stop(self) -> None:
        """Stop accepting, finish the requests under way (at most 2 s), and end the task. Safe to call twice."""
        server, task = self._server, self._task
        self._server = self._task = None
        if server is None or task is None:
            return
        server.should_exit = True
        try:
            await asyncio.wait_for(asyncio.shield(task), 10)
        except TimeoutError:
            server.force_exit = True
            try:
                await cancel_and_wait(task)
            except Exception:
                logger.exception("%s server failed while stopping", self.name)
        except asyncio.CancelledError:
            task.cancel()
            raise
        except Exception:
            logger.exception("%s server failed while stopping", self.name)
