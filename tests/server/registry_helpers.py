"""Helpers of the tool registry tests: a bot with its registry served on a free loopback port, small in-process
callback servers, and a second process offering tools through `ToolRegistryClient`."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import Process
from anyio.streams.text import TextReceiveStream
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from core.server import EmbeddedServer, ToolRegistryServer
from core.testing import ChatHarness

TOKEN = "test-registry-token"
REPO = Path(__file__).resolve().parents[2]
PROCESS_SCRIPT = Path(__file__).with_name("remote_tools_process.py")
TEXT_TOOL = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}


@contextlib.asynccontextmanager
async def registry_bot(
    provider: Any,
    data_dir: Path,
    *,
    port: int = 0,
    token: str | None = TOKEN,
    plugins: list[Any] = (),
    max_body_bytes: int | None = None,
    allow_failed: bool = False,
) -> AsyncIterator[tuple[ChatHarness, ToolRegistryServer]]:
    """A `ChatHarness` whose app serves its tool registry on 127.0.0.1 (`port` 0: a free one); `allow_failed` as
    the harness's (a test of a plugin that fails to load)."""
    server_cfg: dict[str, Any] = {"host": "127.0.0.1", "port": port}
    if token is not None:
        server_cfg["token"] = token
    if max_body_bytes is not None:
        server_cfg["max_body_bytes"] = max_body_bytes
    config = {"data": {"dir": str(data_dir)}, "server": server_cfg}
    async with ChatHarness(plugins=plugins, provider=provider, config=config, allow_failed=allow_failed) as bot:
        server = ToolRegistryServer(
            bot.app.config.server, bot.app.plugins.tools, bot.app.data_dir, recheck_interval=0.2, probe_timeout=1.0
        )
        bot.app.tool_server = server
        await server.start()
        yield bot, server


def registration(name: str, callback_url: str, **extra: Any) -> dict[str, Any]:
    """A registration body for tool `name`."""
    body = {
        "name": name,
        "description": f"the {name} tool",
        "parameters": TEXT_TOOL,
        "callback_url": callback_url,
        "source": "tests",
        "role": None,
        "timeout_seconds": 5,
    }
    body.update(extra)
    return body


def auth(token: str = TOKEN) -> dict[str, str]:
    """The Authorization header for `token`."""
    return {"Authorization": f"Bearer {token}"}


@contextlib.asynccontextmanager
async def callback_server(
    handler: Callable[[dict[str, Any]], Any], *, seen_headers: list[tuple[str, dict[str, str]]] | None = None
) -> AsyncIterator[EmbeddedServer]:
    """An in-process callback server on a free loopback port: `POST /cb` answers `handler(body)` (a dict is sent
    as JSON, a `Response` as is); `GET /cb` answers 200. `seen_headers` collects `(method, headers)` of each
    request."""

    def saw(request: Request) -> None:
        if seen_headers is not None:
            seen_headers.append((request.method, dict(request.headers)))

    async def call(request: Request) -> Response:
        saw(request)
        answer = handler(await request.json())
        return answer if isinstance(answer, Response) else JSONResponse(answer)

    async def probe(request: Request) -> Response:
        saw(request)
        return JSONResponse({"ok": True})

    server = EmbeddedServer(
        Starlette(routes=[Route("/cb", call, methods=["POST"]), Route("/cb", probe, methods=["GET"])]), "127.0.0.1", 0
    )
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


class RemoteProcess:
    """The second process (`remote_tools_process.py`): offers `shout` through `ToolRegistryClient`."""

    def __init__(self, registry_url: str, log: Path) -> None:
        self.registry_url = registry_url
        self.log = log
        self.process: Process | None = None
        self.output = ""

    async def start(self, *, wait_for: str = "REGISTERED", timeout: float = 30.0) -> None:
        """Start it and wait (bounded) until it prints `wait_for`."""
        env = {**os.environ, "PYTHONPATH": str(REPO), "HOOKCHAT_TEST_TOKEN": TOKEN}
        self.output = ""
        with self.log.open("ab") as err:
            self.process = await anyio.open_process(
                [sys.executable, str(PROCESS_SCRIPT), self.registry_url], env=env, cwd=str(REPO), stderr=err
            )
        assert self.process.stdout is not None
        with anyio.fail_after(timeout):
            async for chunk in TextReceiveStream(self.process.stdout):
                self.output += chunk
                if wait_for in self.output:
                    return
        raise AssertionError(f"the remote process exited before printing {wait_for!r}: {self.log.read_text()}")

    async def stop(self) -> None:
        """Terminate it and wait (bounded); killed when it does not exit."""
        process, self.process = self.process, None
        if process is None:
            return
        if process.returncode is None:
            process.terminate()
            with anyio.move_on_after(10):
                await process.wait()
            if process.returncode is None:
                process.kill()
                with anyio.move_on_after(10):
                    await process.wait()
        await process.aclose()
