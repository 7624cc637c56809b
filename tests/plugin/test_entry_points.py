"""Plugins shipped as installed packages: a real distribution, built and installed by pip into a temporary
directory, whose `hookchat.plugins` entry point the plugin manager discovers and loads."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from core.plugin import ENTRY_POINT_GROUP, PluginContext

PYPROJECT = """
    [build-system]
    requires = ["setuptools>=61"]
    build-backend = "setuptools.build_meta"

    [project]
    name = "hookchat-demo-plugin"
    version = "0.3.0"

    [project.entry-points."hookchat.plugins"]
    demo = "demo_pkg:DemoPlugin"

    [tool.setuptools]
    packages = ["demo_pkg"]
"""

DEMO_PKG = """
    from core.plugin import BasePlugin, on, register

    from .words import GREETING


    class DemoPlugin(BasePlugin):
        @on.custom_event(event_name="ping")
        async def pong(self, event):
            event.data.append(GREETING)

        @register.tool(name="demo_echo", description="echo the text back")
        async def echo(self, event, *_, text: str = "") -> str:
            return text
"""


@pytest.fixture(scope="module")
def installed_demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the demo distribution and install it with pip into a fresh directory (not on sys.path yet)."""
    project = tmp_path_factory.mktemp("demo-project")
    (project / "pyproject.toml").write_text(textwrap.dedent(PYPROJECT), encoding="utf-8")
    (project / "demo_pkg").mkdir()
    (project / "demo_pkg" / "__init__.py").write_text(textwrap.dedent(DEMO_PKG), encoding="utf-8")
    (project / "demo_pkg" / "words.py").write_text('GREETING = "hello from an installed package"\n', encoding="utf-8")
    target = tmp_path_factory.mktemp("site-packages")
    pip = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            "--no-build-isolation",
            "--target",
            str(target),
            str(project),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert pip.returncode == 0, f"pip could not build and install the demo (needs setuptools, wheel):\n{pip.stderr}"
    return target


@pytest.fixture
def demo_on_path(installed_demo: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.syspath_prepend(str(installed_demo))
    yield installed_demo
    for name in [m for m in sys.modules if m == "demo_pkg" or m.startswith("demo_pkg.")]:
        del sys.modules[name]


def test_the_installed_distribution_exposes_the_entry_point(demo_on_path: Path) -> None:
    [entry_point] = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "demo"]

    assert entry_point.value == "demo_pkg:DemoPlugin"
    assert entry_point.dist.name == "hookchat-demo-plugin" and entry_point.dist.version == "0.3.0"


@pytest.mark.anyio
async def test_the_plugin_manager_discovers_and_loads_it(demo_on_path: Path, make_manager) -> None:
    manager = make_manager(plugin_dirs=[], entry_points=True)
    await manager.load_all()

    status = manager.status("demo")
    assert status.state == "loaded", status.reason
    assert status.origin == "entry point demo (demo_pkg:DemoPlugin)"
    assert (status.hooks, status.tools) == (["custom_event:ping:pong"], ["demo_echo"])
    event = await PluginContext("tests", manager=manager).dispatch_custom("ping", [])
    assert event.data == ["hello from an installed package"]
    assert await manager.tools.get("demo_echo").invoke(None, {"text": "hi"}) == "hi"

    await manager.unload("demo")

    assert manager.status("demo") is None and "demo_echo" not in manager.tools
    assert all(e["plugin_id"] != "demo" for chain in manager.hook_chains().values() for e in chain)
