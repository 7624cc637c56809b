"""Fixtures of the web console tests: a bot with the scripted model of the testing kit and the console on a free
loopback port, run in a thread of its own so that a (synchronous) browser can drive it."""

from __future__ import annotations

import asyncio
import shutil
import threading
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import httpx
import pytest

from core.testing import ChatHarness, ScriptedProvider
from core.web import WebConsole

SAMPLE_PLUGINS = Path(__file__).resolve().parent / "sample_plugins"
ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"


def copy_sample(name: str, into: Path) -> Path:
    """A fresh copy of a sample plugin folder (tests edit their copies)."""
    target = into / name
    shutil.copytree(SAMPLE_PLUGINS / name, target, ignore=shutil.ignore_patterns("__pycache__"))
    return target


class LiveConsole:
    """A running bot and its console on an event loop in a background thread; `call(coro)` runs on that loop.

    The console has its token as always (generated into the data directory unless `token` is given): `client()`
    is an HTTP client that sends it, `auth` the header for other clients, `login_url` the address for a browser.
    """

    def __init__(self, plugins: list[Path], provider: ScriptedProvider, data_dir: Path, token: str | None = None):
        self.provider = provider
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="live-console", daemon=True)
        self.thread.start()
        self.harness = ChatHarness(plugins=plugins, provider=provider, config={"data": {"dir": str(data_dir)}})
        self.console: WebConsole | None = None
        self.token = token
        self.call(self._start())

    async def _start(self) -> None:
        await self.harness.__aenter__()
        self.console = WebConsole(self.harness.app, port=0, token=self.token)
        await self.console.start()

    async def _stop(self) -> None:
        if self.console is not None:
            await self.console.stop()
        await self.harness.__aexit__(None, None, None)

    @property
    def app(self) -> Any:
        return self.harness.app

    @property
    def url(self) -> str:
        assert self.console is not None
        return self.console.url

    @property
    def login_url(self) -> str:
        """The console's address with `?token=`, as `hookchat web` prints it."""
        assert self.console is not None
        return self.console.login_url

    @property
    def auth(self) -> dict[str, str]:
        """The `Authorization` header that carries the console's token."""
        assert self.console is not None
        return {"Authorization": f"Bearer {self.console.token}"}

    def client(self) -> httpx.Client:
        """An HTTP client of the console that sends its token."""
        return httpx.Client(base_url=self.url, headers=self.auth)

    def call(self, coro: Any, timeout: float = 30) -> Any:
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(timeout)

    def close(self) -> None:
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout=10)
            self.loop.close()


@pytest.fixture
def live_console(tmp_path: Path) -> Iterator[LiveConsole]:
    """The bot (built-in plugins plus a copy of the `greeter` sample) with a streaming scripted model."""
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    greeter = copy_sample("greeter", plugins)
    live = LiveConsole([greeter], ScriptedProvider(chunk_size=3), tmp_path / "data")
    try:
        yield live
    finally:
        live.close()
