"""Fixtures of the security tests: the asyncio backend, and a real HTTP server on loopback that counts the
requests it gets (the proof that a schema made hookchat fetch nothing)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class CountingServer:
    """A loopback HTTP server in its own thread: every GET is counted and answered with a JSON Schema."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                owner.hits.append(self.path)
                body = b'{"type": "string"}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> CountingServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def counting_server() -> Iterator[CountingServer]:
    with CountingServer() as server:
        yield server
