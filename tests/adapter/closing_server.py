"""`ClosingServer`: a raw HTTP/1.1 server whose kept-alive connections a test ends when it chooses, as a server's
own keep-alive limit does, in the test's own step (so the client has not yet seen the end of stream when it writes
its next request): the race between a server closing an idle connection and a client reusing it, made
deterministic. Used by the tests of `core.adapter.http_client` and of the adapters that send through it."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from types import TracebackType


class ClosingServer:
    """Answers every request with status 200 and `body` (JSON), on connections numbered from 0 as they are
    accepted; `requests` lists (connection number, request line) of each request read whole. Use it as
    `async with ClosingServer(body) as server:` (it serves from `server.url`)."""

    def __init__(self, body: bytes = b"ok") -> None:
        self.body = body
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.setblocking(False)
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.connections: list[socket.socket] = []
        self.requests: list[tuple[int, bytes]] = []
        self._tasks: list[asyncio.Task[None]] = []

    def end(self, number: int) -> None:
        """End connection `number` now, as a server's keep-alive limit does (what the client sends next is not
        read)."""
        self.connections[number].shutdown(socket.SHUT_RDWR)

    async def __aenter__(self) -> ClosingServer:
        self._tasks.append(asyncio.get_running_loop().create_task(self._serve()))
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for connection in self.connections:
            connection.close()
        self.listener.close()

    async def _serve(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(self.listener)
            self.connections.append(connection)
            self._tasks.append(loop.create_task(self._answer(len(self.connections) - 1, connection)))

    async def _answer(self, number: int, connection: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(self.body),
            self.body,
        )
        received = b""
        with contextlib.suppress(OSError):
            while chunk := await loop.sock_recv(connection, 65536):
                received += chunk
                while b"\r\n\r\n" in received:
                    head, _, rest = received.partition(b"\r\n\r\n")
                    fields = [line.split(b":", 1) for line in head.split(b"\r\n")[1:]]
                    length = next((int(v) for k, v in fields if k.strip().lower() == b"content-length"), 0)
                    if len(rest) < length:
                        break
                    received = rest[length:]
                    self.requests.append((number, head.split(b"\r\n")[0]))
                    await loop.sock_sendall(connection, answer)
