"""Fixtures of the hook engine and plugin manager tests: an engine that is always closed, a manager over a temporary
plugin directory, a writer of plugin folders, and a recorder of blinker signals."""

from __future__ import annotations

import contextlib
import json
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import blinker
import pytest

from core.plugin import HookEngine, PluginLoader


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def engine():
    """A hook engine with a one-second default deadline; its watchdogs are stopped after the test."""
    engine = HookEngine(default_deadline=1.0)
    yield engine
    await engine.aclose()


@pytest.fixture
def plugins_root(tmp_path: Path) -> Path:
    root = tmp_path / "plugins"
    root.mkdir()
    return root


@pytest.fixture
async def make_manager(engine: HookEngine, plugins_root: Path, tmp_path: Path):
    """`make_manager(**options)`: a plugin manager on `engine` over `plugins_root`, without entry points unless
    `options` say otherwise; every plugin it loaded is stopped after the test."""
    managers: list[PluginLoader] = []

    def make(**options: Any) -> PluginLoader:
        options = {"plugin_dirs": [plugins_root], "data_dir": tmp_path / "data", "entry_points": False, **options}
        managers.append(PluginLoader(engine, **options))
        return managers[-1]

    yield make
    for manager in managers:
        await manager.shutdown()


@pytest.fixture
def manager(make_manager: Callable[..., PluginLoader]) -> PluginLoader:
    """A plugin manager over `plugins_root`, without entry points."""
    return make_manager()


WritePlugin = Callable[..., Path]


@pytest.fixture
def write_plugin(plugins_root: Path) -> WritePlugin:
    """Write a plugin folder: `write_plugin("echo", code, schema={...}, files={"helpers.py": ...})`.

    `code` goes to `main.py` (or to `entry`), dedented; the manifest gets `plugin_id` (default: the folder name)
    and whatever `manifest` adds. Writing the same folder again replaces its files, as an edit on disk would.
    """

    def write(
        folder: str,
        code: str = "",
        *,
        entry: str = "main.py",
        manifest: dict[str, Any] | None = None,
        schema: dict[str, Any] | None = None,
        files: dict[str, str] | None = None,
    ) -> Path:
        path = plugins_root / folder
        path.mkdir(exist_ok=True)
        data = {
            "plugin_id": folder,
            "display_name": folder.title(),
            "version": "1.0.0",
            "author": "tests",
            "description": f"the {folder} test plugin",
            "core_version": ">=0.1",
        }
        data.update(manifest or {})
        (path / "manifest.json").write_text(json.dumps(data), encoding="utf-8")
        if schema is not None:
            (path / "schema.json").write_text(json.dumps(schema), encoding="utf-8")
        (path / entry).write_text(textwrap.dedent(code), encoding="utf-8")
        for name, text in (files or {}).items():
            (path / name).write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    return write


@pytest.fixture
def record_signal() -> Iterator[Callable[..., list[dict[str, Any]]]]:
    """`calls = record_signal(signals.plugin_loaded)`: the keyword arguments of every send during the test."""
    with contextlib.ExitStack() as stack:

        def record(signal: blinker.Signal, sender: Any = blinker.ANY) -> list[dict[str, Any]]:
            calls: list[dict[str, Any]] = []
            stack.enter_context(signal.connected_to(lambda _sender, **kwargs: calls.append(kwargs), sender=sender))
            return calls

        yield record
