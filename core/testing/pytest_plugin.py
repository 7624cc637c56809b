"""pytest fixtures of the testing kit (registered through the `pytest11` entry point of hookchat).

`scripted_provider` is a fresh `ScriptedProvider`; `chat_harness` is a factory: `async with chat_harness(plugins=[P])
as bot: ...` with the fixture's provider as default. An `async def test_...` runs on asyncio with no marker and no
`anyio_backend` fixture to write: this plugin turns on anyio's auto mode and chooses the asyncio backend (a
project's `--anyio-mode=strict` or own `anyio_backend` fixture, or pytest-asyncio in its auto mode, still wins;
pytest-asyncio in its default strict mode runs only the tests marked for it, so the others still run here).
"""

from __future__ import annotations

import types
from typing import Any

import pytest

from core.testing import ChatHarness, ScriptedProvider


def _asyncio_backend() -> str:
    """The backend anyio's pytest plugin runs `async def` tests on: asyncio (hookchat needs it)."""
    return "asyncio"


# Registered in `pytest_configure`, after every installed plugin, so that it overrides anyio's own `anyio_backend`
# (which would run each test on every backend installed, trio too).
_BACKEND = types.ModuleType("hookchat_asyncio_backend")
_BACKEND.anyio_backend = pytest.fixture(scope="module", name="anyio_backend")(_asyncio_backend)  # type: ignore[attr-defined] - a module made at run time, its attributes too


@pytest.fixture
def scripted_provider() -> ScriptedProvider:
    """A `ScriptedProvider` with no responses queued; add them with `.add(...)`."""
    return ScriptedProvider()


@pytest.fixture
def chat_harness(scripted_provider: ScriptedProvider):
    """A factory of `ChatHarness`es that use the `scripted_provider` fixture unless given another provider."""

    def make(*args: Any, **kwargs: Any) -> ChatHarness:
        kwargs.setdefault("provider", scripted_provider)
        return ChatHarness(*args, **kwargs)

    return make


def _ini(config: pytest.Config, name: str) -> str:
    """An ini option of another plugin (its command-line form first), or "" when that plugin does not declare it."""
    try:
        return str(config.getoption(name, None) or config.getini(name) or "")
    except ValueError:
        return ""


def pytest_configure(config: pytest.Config) -> None:
    """Run every `async def` test on anyio (its documented `anyio_mode = "auto"`), unless the command line chose a
    mode (`--anyio-mode=strict`) or the project runs every async test on pytest-asyncio (`asyncio_mode = auto`)."""
    asyncio_auto = config.pluginmanager.has_plugin("asyncio") and _ini(config, "asyncio_mode") == "auto"
    if config.getoption("anyio_mode", None) is None and not asyncio_auto:
        config.option.anyio_mode = "auto"
    config.pluginmanager.register(_BACKEND, "hookchat-asyncio-backend")
