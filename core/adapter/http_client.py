"""`HTTPClient`: the HTTP/1.1 client of the requests an adapter makes for every message (Telegram's `getUpdates` and
`sendMessage`, Matrix's `/sync` and `send`), to one origin over kept-alive connections, the answers parsed by
httptools.

aiohttp's client spends 140-180 us of CPU on such a request over loopback (its request and response objects, header
merging, URL handling, trace signals), as much as half of what the rest of a message costs; this one writes a
request head made mostly in advance and reads the answer's status and body, and nothing else. Whatever else an
adapter asks (uploads, downloads, logins) still goes through its platform library.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import httptools

__all__ = ["HTTPClient", "HTTPError", "Answer", "Headers"]

#: Methods a request is sent again for when a kept-alive connection turns out closed before any answer (as aiohttp
#: does): sending one of these twice does no more than sending it once. A caller marks any other request that may be
#: sent again in that case with `retry_unanswered=True`.
IDEMPOTENT = frozenset({"GET", "PUT", "DELETE"})

#: The largest answer body read (bytes): a server that sends more (a misconfigured or hostile one) gets the request
#: failed with `HTTPError`, not the bot's memory. A Matrix /sync or a Telegram getUpdates answer is far smaller.
MAX_BODY = 64 * 1024 * 1024


class HTTPError(OSError):
    """The connection closed before a whole answer came, or what came is not HTTP. An `OSError`, as a refused or
    reset connection is: callers treat all of them as the server being unreachable."""


@dataclass(frozen=True, slots=True)
class Answer:
    """A server's answer: its status and its whole body."""

    status: int
    body: bytes


class Headers:
    """Request header fields, encoded once for all the requests that send them. Raises `ValueError` for a name or
    value that would end the field early (a line break) or is not Latin-1."""

    __slots__ = ("raw",)

    def __init__(self, fields: Mapping[str, str]) -> None:
        lines = []
        for name, value in fields.items():
            if any(c in name + value for c in "\r\n\0") or ":" in name:
                raise ValueError(f"header {name!r} has a character an HTTP header field cannot hold")
            lines.append(f"{name}: {value}\r\n")
        self.raw = "".join(lines).encode("latin-1")


_NO_HEADERS = Headers({})


class HTTPClient:
    """Requests to the origin of `base_url` (`http://host:port` or `https://...`; any path in it is ignored: each
    request names its own target). `headers` go with every request; `ssl_context` verifies an `https` origin (the
    system's default context when None). At most `limit` connections are open at once (a request past them waits
    for one); an idle one is closed after `idle_timeout` seconds, or when the server closes it. An answer whose body
    passes `max_body` bytes fails its request with `HTTPError`.

    A server may close an idle connection just as a request is written on it (its own keep-alive limit, shorter than
    `idle_timeout`): the request then meets the connection's end (end of stream or a reset) before any byte of its
    answer, and the server never read it (a server that read it and then failed without a byte of answer looks the
    same). Such a request is sent once more, on a new connection, when its method is idempotent or the caller says
    it may be (`retry_unanswered`); any other failure is raised.

    Answers must say where they end (`Content-Length`, chunked, or the connection closing); HEAD and `Expect`
    requests are not supported.
    """

    def __init__(
        self,
        base_url: str,
        *,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        limit: int = 100,
        idle_timeout: float = 15.0,
        max_body: int = MAX_BODY,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{base_url!r} is not an http(s) URL")
        self._host = parts.hostname
        self._port = parts.port or (443 if parts.scheme == "https" else 80)
        self._ssl = (ssl_context or ssl.create_default_context()) if parts.scheme == "https" else None
        default_port = self._port == (443 if parts.scheme == "https" else 80)
        host = parts.hostname.encode("idna").decode() if not parts.hostname.isascii() else parts.hostname
        if ":" in host:  # an IPv6 address
            host = f"[{host}]"
        authority = host if default_port else f"{host}:{self._port}"
        self._common = f"Host: {authority}\r\n".encode() + Headers(headers or {}).raw
        self._slots = asyncio.Semaphore(limit)
        self._idle: list[_Connection] = []  # the most recently used last
        self._idle_timeout = idle_timeout
        self._max_body = max_body
        self._closed = False

    async def request(
        self,
        method: str,
        target: str,
        body: bytes | None = None,
        *,
        headers: Headers = _NO_HEADERS,
        content_type: str = "application/json",
        timeout: float,
        retry_unanswered: bool = False,
    ) -> Answer:
        """Send `method target` (the path and query, encoded) with `body` (of `content_type`), `headers` besides
        the client's; the answer once it has all come. Raises `TimeoutError` when the whole exchange (connecting
        included) takes longer than `timeout` seconds, `OSError` (`HTTPError` among them) when the server cannot be
        reached or does not answer in HTTP. `retry_unanswered`: a request of another method than GET, PUT or DELETE
        may be sent again once, on a new connection, when the kept-alive connection it was written on turns out
        closed before any byte of the answer (see the class)."""
        if self._closed:
            raise HTTPError("the client is closed")
        head = [f"{method} {target} HTTP/1.1\r\n".encode(), self._common, headers.raw]
        if body is not None:
            head.append(f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n".encode())
            head.append(body)
        else:
            head.append(b"\r\n")
        request = b"".join(head)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        if self._slots.locked():  # `limit` requests under way: waiting for one to end counts in the timeout
            async with asyncio.timeout_at(deadline):
                await self._slots.acquire()
        else:
            await self._slots.acquire()
        try:
            connection = self._reused()
            if connection is not None:
                try:
                    return await self._exchange(connection, request, deadline)
                except _ClosedUnanswered:
                    # the server closed it (as idle) while the request was written: it never read the request
                    if not (retry_unanswered or method in IDEMPOTENT):
                        raise HTTPError("the server closed a kept-alive connection before answering") from None
            async with asyncio.timeout_at(deadline):
                connection = await self._connect()
            return await self._exchange(connection, request, deadline)
        finally:
            self._slots.release()

    async def close(self) -> None:
        """Close the idle connections, and every other one as its request ends; later requests raise `HTTPError`."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def _reused(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            connection = self._idle.pop()
            if connection.usable and now - connection.idle_since < self._idle_timeout:
                return connection
            connection.close()
        return None

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, connection = await loop.create_connection(
            lambda: _Connection(self._max_body),
            self._host,
            self._port,
            ssl=self._ssl,
            server_hostname=self._host if self._ssl else None,
        )
        return connection

    async def _exchange(self, connection: _Connection, request: bytes, deadline: float) -> Answer:
        try:
            answer = await connection.exchange(request, deadline)
        except BaseException:
            connection.close()  # cancelled, timed out or broken midway: its state is unknown
            raise
        if connection.usable and not self._closed:
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            connection.close()
        return answer


class _ClosedUnanswered(HTTPError):
    """A connection closed before any byte of the answer to the request written on it."""


class _Connection(asyncio.Protocol):
    """One connection: a request written, its answer parsed as it arrives (httptools calls `on_body` and
    `on_message_complete`), then the next request."""

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body
        self._size = 0  # of the current answer's body so far
        self._transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._body: list[bytes] = []
        self._waiter: asyncio.Future[Answer] | None = None
        self._timer: asyncio.TimerHandle | None = None  # at or before the current exchange's deadline
        self._deadline = 0.0  # of the current exchange (the loop's time)
        self._received = False  # any byte of the current answer
        self._ends_at_eof = False  # the current answer's body is all that comes before the connection closes
        self._keep_alive = True
        self.usable = True  # open, and may carry another request
        self.idle_since = 0.0

    def exchange(self, request: bytes, deadline: float) -> asyncio.Future[Answer]:
        """Write `request`; the future of its answer, failed with `TimeoutError` at `deadline` (the loop's time).
        (A timer of the connection's own, kept from one exchange to the next while it is due no later than the
        current deadline, and moved on when it fires early: `asyncio.timeout` around the exchange cost a third of
        its CPU, and a timer made and cancelled for every exchange a fifth of what is left.)"""
        assert self._transport is not None and self._waiter is None
        loop = asyncio.get_running_loop()
        self._waiter = loop.create_future()
        self._deadline = deadline
        if self._timer is None or self._timer.when() > deadline:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = loop.call_at(deadline, self._deadline_passed)
        self._body, self._size, self._received, self._ends_at_eof = [], 0, False, False
        self._transport.write(request)
        return self._waiter

    def close(self) -> None:
        """Close the connection (it is not used again)."""
        self.usable = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.close()

    # -- asyncio.Protocol --

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing was asked: a server talking out of turn
            self.close()
            return
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(HTTPError(f"the answer is not HTTP: {exc}"))

    def eof_received(self) -> bool:
        self._closed()
        return False  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed(exc)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- httptools' callbacks --

    def on_headers_complete(self) -> None:
        # llhttp keeps nothing alive whose body ends only with the connection (nor what says Connection: close)
        self._keep_alive = self._parser.should_keep_alive()
        self._ends_at_eof = not self._keep_alive

    def on_body(self, chunk: bytes) -> None:
        self._size += len(chunk)
        if self._size > self._max_body:
            self._fail(HTTPError(f"the answer's body passed {self._max_body:,} bytes"))
            return
        self._body.append(chunk)

    def on_message_complete(self) -> None:
        waiter, self._waiter = self._waiter, None
        if not self._keep_alive:
            self.close()
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self._parser.get_status_code(), b"".join(self._body)))

    # --

    def _closed(self, exc: Exception | None = None) -> None:
        self.usable = False
        if self._waiter is None:
            return
        if self._ends_at_eof:  # headers came, and the body is what came until now
            self.on_message_complete()
        elif not self._received:
            self._fail(_ClosedUnanswered("the server closed the connection before answering"))
        else:
            self._fail(HTTPError(f"the server closed the connection in the middle of its answer ({exc or 'EOF'})"))

    def _deadline_passed(self) -> None:
        self._timer = None
        if self._waiter is None:  # idle: the next exchange sets it again
            return
        loop = asyncio.get_running_loop()
        if loop.time() < self._deadline:  # set for an earlier exchange, which ended in time
            self._timer = loop.call_at(self._deadline, self._deadline_passed)
        else:
            self._fail(TimeoutError())

    def _fail(self, exc: Exception) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
