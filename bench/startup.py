"""Start-up time with 50 plugin folders (model load excluded), against importing the same 50 modules by hand; and
the whole `hookchat --help` and `hookchat plugins` processes (wall and CPU time), against a bare `python -c pass`.

Run: .venv/bin/python bench/startup.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat
from core.config import HookchatConfig
from core.testing import ScriptedProvider

PLUGINS = 50
MAIN = """
from core.plugin import BasePlugin, on, register


class Plugin{i}(BasePlugin):
    @on.im_message(priority={i})
    async def seen(self, event, *_):
        pass

    @on.llm_request()
    async def prompt(self, event, req, tag_set, *_):
        pass

    @register.tool("tool_{i}", "Tool {i}", {{"type": "object", "properties": {{"q": {{"type": "string"}}}}}})
    async def tool(self, event, *_, q: str = "") -> str:
        return q
"""


def write_plugins(root: Path) -> None:
    for i in range(PLUGINS):
        folder = root / f"plugin_{i:02d}"
        folder.mkdir()
        (folder / "manifest.json").write_text(json.dumps({"plugin_id": f"plugin_{i:02d}", "core_version": ">=0.1"}))
        (folder / "schema.json").write_text(json.dumps({"n": {"type": "integer", "default": i}}))
        (folder / "main.py").write_text(MAIN.format(i=i))


async def start_app(root: Path, data: Path) -> float:
    config = HookchatConfig.model_validate({"plugins": {"dirs": [str(root)]}, "data": {"dir": str(data)}})
    started = time.perf_counter()
    app = HookChat(config, provider=ScriptedProvider(), entry_points=False)
    await app.start()
    elapsed = time.perf_counter() - started
    failed = [f"{s.plugin_id}: {s.reason}" for s in app.plugins.statuses() if s.state != "loaded"]
    assert not failed, failed
    await app.aclose()
    return elapsed


def import_by_hand(root: Path, tag: str) -> float:
    started = time.perf_counter()
    for folder in sorted(root.iterdir()):
        spec = importlib.util.spec_from_file_location(f"bare_{tag}_{folder.name}", folder / "main.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return time.perf_counter() - started


COMMAND_TARGET = 0.2  # seconds, whole process, on a quiet machine


#: The commands' environment: bytecode written and read as a user's installed hookchat has it (pip compiles a wheel
#: at install), whatever this shell says (a PYTHONDONTWRITEBYTECODE=1 here made every run compile every module).
ENV = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}


def whole_process(argv: list[str], cwd: Path, runs: int = 5) -> tuple[float, float]:
    """The best wall time and the best CPU time (user + system) of `runs` runs of `argv`, in seconds, after one
    run that writes the bytecode and the compiled code (core/utils/compiled_code.py) the others read."""
    subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    walls, cpus = [], []
    for _ in range(runs):
        before = os.times()
        started = time.perf_counter()
        subprocess.run(argv, cwd=cwd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        walls.append(time.perf_counter() - started)
        after = os.times()
        cpus.append(after.children_user - before.children_user + after.children_system - before.children_system)
    return min(walls), min(cpus)


def commands(tmp: Path) -> None:
    """`hookchat --help` and `hookchat plugins` from an empty folder, against the interpreter starting alone."""
    empty = tmp / "empty"
    empty.mkdir()
    env_root = str(Path(__file__).resolve().parent.parent)
    python = sys.executable
    cli = ["-c", f"import sys; sys.path.insert(0, {env_root!r}); from core.cli import main; sys.exit(main())"]
    bare_wall, bare_cpu = whole_process([python, "-c", "pass"], empty)
    print(f"baseline, python -c pass: {bare_wall * 1000:.0f} ms wall, {bare_cpu * 1000:.0f} ms CPU")
    for args in (["--help"], ["plugins"]):
        wall, cpu = whole_process([python, *cli, *args], empty)
        met = "met" if wall <= COMMAND_TARGET else "not met"
        print(
            f"hookchat {' '.join(args):8s}: {wall * 1000:.0f} ms wall ({wall / bare_wall:.1f}x the bare interpreter), "
            f"{cpu * 1000:.0f} ms CPU (target: <= {COMMAND_TARGET * 1000:.0f} ms wall: {met}; "
            f"load average {os.getloadavg()[0]:.1f})"
        )


def main() -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        commands(Path(tmp))
        root = Path(tmp) / "plugins"
        root.mkdir()
        write_plugins(root)
        runs = [asyncio.run(start_app(root, Path(tmp) / f"data{n}")) for n in range(3)]
        bare = min(import_by_hand(root, str(n)) for n in range(3))
    best = min(runs)
    print(
        f"start-up with {PLUGINS} plugins: best {best * 1000:.0f} ms, runs "
        f"{', '.join(f'{r * 1000:.0f}' for r in runs)} ms (target: under 1000 ms, model load excluded)"
    )
    print(f"baseline, importing the same {PLUGINS} modules by hand: {bare * 1000:.0f} ms ({best / bare:.1f}x)")


if __name__ == "__main__":
    main()
