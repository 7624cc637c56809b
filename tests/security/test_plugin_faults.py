"""Plugin code cannot end or hang start-up: SystemExit, KeyboardInterrupt and other BaseExceptions raised while
importing or initialising a plugin are that plugin's failure; a slow stage is reported with its time; an import
or `initialize()` past the start-up deadline fails the plugin and the others load."""

from __future__ import annotations

import json
import textwrap
import threading
from pathlib import Path

import pytest

from core.plugin import HookEngine, PluginLoader, _lifecycle

pytestmark = pytest.mark.anyio

HEALTHY = """
from core.plugin import BasePlugin

class Healthy(BasePlugin):
    pass
"""


def _plugin(root: Path, plugin_id: str, code: str) -> None:
    folder = root / plugin_id
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"plugin_id": plugin_id}))
    (folder / "main.py").write_text(textwrap.dedent(code))


async def _load(tmp_path: Path, code: str, *, init_timeout: float = 30.0) -> dict[str, object]:
    """Load a plugin of `code` (status under "broken") beside a healthy one."""
    root = tmp_path / "plugins"
    # A module name of its own per test: an abandoned import still holds its module's import lock.
    broken = f"broken_{tmp_path.name}"
    _plugin(root, broken, code)
    _plugin(root, "healthy", HEALTHY)
    engine = HookEngine()
    loader = PluginLoader(
        engine, plugin_dirs=[root], data_dir=tmp_path / "data", entry_points=False, init_timeout=init_timeout
    )
    try:
        statuses = {"broken" if s.plugin_id == broken else s.plugin_id: s for s in await loader.load_all()}
        await loader.shutdown()
    finally:
        await engine.aclose()
    assert statuses["healthy"].state == "loaded"  # the others always load
    return statuses


@pytest.mark.parametrize("raised", ["SystemExit(3)", "KeyboardInterrupt()", "type('Odd', (BaseException,), {})()"])
async def test_a_base_exception_at_import_is_the_plugins_failure(tmp_path: Path, raised: str) -> None:
    statuses = await _load(tmp_path, f"raise {raised}\n")

    assert statuses["broken"].state == "error"
    assert "import of" in statuses["broken"].reason


async def test_system_exit_in_initialize_is_the_plugins_failure(tmp_path: Path) -> None:
    statuses = await _load(
        tmp_path,
        """
        from core.plugin import BasePlugin

        class Quits(BasePlugin):
            async def initialize(self):
                raise SystemExit("bye")
    """,
    )

    assert statuses["broken"].state == "error" and "SystemExit" in statuses["broken"].reason


async def test_a_slow_import_is_reported_with_its_time(tmp_path: Path, caplog, monkeypatch) -> None:
    monkeypatch.setattr(_lifecycle, "SLOW_START", 0.05)
    statuses = await _load(tmp_path, "import time\ntime.sleep(0.2)\n" + HEALTHY.replace("Healthy", "Slow"))

    assert statuses["broken"].state == "loaded"
    warning = next(r.getMessage() for r in caplog.records if "'broken_" in r.getMessage() and "took" in r.getMessage())
    assert "import took" in warning and " s" in warning


async def test_an_import_that_does_not_return_in_time_is_abandoned(tmp_path: Path) -> None:
    statuses = await _load(tmp_path, "import time\ntime.sleep(3)\n", init_timeout=0.3)

    assert statuses["broken"].state == "error"
    assert "import did not finish within the start-up deadline" in statuses["broken"].reason


async def test_an_initialize_that_blocks_the_loop_past_the_deadline_fails_the_plugin(tmp_path: Path) -> None:
    statuses = await _load(
        tmp_path,
        """
        import time
        from core.plugin import BasePlugin

        class Blocks(BasePlugin):
            async def initialize(self):
                time.sleep(0.5)  # blocking, on the event loop
    """,
        init_timeout=0.2,
    )

    assert statuses["broken"].state == "error" and "past the start-up deadline" in statuses["broken"].reason


async def test_a_synchronous_initialize_that_never_returns_is_abandoned(tmp_path: Path) -> None:
    statuses = await _load(
        tmp_path,
        """
        import time
        from core.plugin import BasePlugin

        class Sync(BasePlugin):
            def initialize(self):
                time.sleep(3)
    """,
        init_timeout=0.3,
    )

    assert statuses["broken"].state == "error"
    assert "initialize() did not finish within the start-up deadline" in statuses["broken"].reason


async def test_an_import_that_never_returns_is_abandoned_in_a_daemon_thread_and_a_fixed_save_loads(tmp_path) -> None:
    root = tmp_path / "plugins"
    _plugin(root, "hangs", "import threading\nthreading.Event().wait()  # never returns\n")
    engine = HookEngine()
    loader = PluginLoader(engine, plugin_dirs=[root], data_dir=tmp_path / "data", entry_points=False, init_timeout=0.3)
    try:
        [status] = await loader.load_all()
        assert status.state == "error" and "import did not finish" in status.reason
        importing = [t for t in threading.enumerate() if "hookchat_plugins" in t.name and ".hangs" in t.name]
        assert importing and all(t.daemon for t in importing), "an abandoned import cannot keep the process alive"

        (root / "hangs" / "main.py").write_text(textwrap.dedent(HEALTHY))  # the fix, saved
        status = await loader.reload("hangs")  # the abandoned thread still holds the old module's import lock
        assert status.state == "loaded", status.reason
        again = await loader.reload("hangs")
        assert again.state == "loaded" and not again.previous_version
    finally:
        await loader.shutdown()
        await engine.aclose()
