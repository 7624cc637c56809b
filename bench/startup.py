"""Start-up time with 50 plugin folders (model load excluded), against importing the same 50 modules by hand.

Run: .venv/bin/python bench/startup.py
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat  # noqa: E402
from core.config import HookchatConfig  # noqa: E402
from core.testing import ScriptedProvider  # noqa: E402

PLUGINS = 50
MAIN = '''
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
'''


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
    assert sum(s.state == "loaded" for s in app.plugins.statuses()) == PLUGINS
    await app.aclose()
    return elapsed


def import_by_hand(root: Path, tag: str) -> float:
    started = time.perf_counter()
    for folder in sorted(root.iterdir()):
        spec = importlib.util.spec_from_file_location(f"bare_{tag}_{folder.name}", folder / "main.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return time.perf_counter() - started


def main() -> None:
    logging.disable(logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "plugins"
        root.mkdir()
        write_plugins(root)
        runs = [asyncio.run(start_app(root, Path(tmp) / f"data{n}")) for n in range(3)]
        bare = min(import_by_hand(root, str(n)) for n in range(3))
    best = min(runs)
    print(f"start-up with {PLUGINS} plugins: best {best * 1000:.0f} ms, runs "
          f"{', '.join(f'{r * 1000:.0f}' for r in runs)} ms (target: under 1000 ms, model load excluded)")
    print(f"baseline, importing the same {PLUGINS} modules by hand: {bare * 1000:.0f} ms ({best / bare:.1f}x)")


if __name__ == "__main__":
    main()
