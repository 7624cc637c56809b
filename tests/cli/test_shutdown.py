"""Stopping a real `hookchat run` or `hookchat web`: SIGTERM (systemd, Docker, Kubernetes) and Ctrl-C end the process within
`[deadlines] shutdown_timeout`, after every `terminate()` that returns in time has run and history was closed,
although one plugin's `terminate()` ignores its cancellation and another plugin's import never returns."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHUTDOWN_TIMEOUT = 4.0

PLUGINS = {
    # Loaded first, so stopped last: after the stuck one below.
    "a_marker": """
from pathlib import Path
from core.plugin import BasePlugin

class Marker(BasePlugin):
    async def terminate(self):
        Path("terminated.txt").write_text("terminated")
""",
    "m_import_hangs": """
import threading
threading.Event().wait()  # an import that never returns
""",
    "z_terminate_hangs": """
import asyncio
from core.plugin import BasePlugin

class Stuck(BasePlugin):
    async def terminate(self):
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # ignores its cancellation
""",
}


def _project(tmp_path: Path) -> Path:
    for plugin_id, code in PLUGINS.items():
        folder = tmp_path / "plugins" / plugin_id
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text(json.dumps({"plugin_id": plugin_id}))
        (folder / "main.py").write_text(code)
    config = tmp_path / "hookchat.toml"
    config.write_text(f"""
[data]
dir = "data"
[plugins]
dirs = ["plugins"]
[adapters]
console = false
[[providers]]
name = "unused"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[server]
port = 0
token = "t"
[web]
port = 0
[deadlines]
plugin_start = 1
shutdown_timeout = {SHUTDOWN_TIMEOUT}
""")
    return config


@pytest.mark.parametrize(
    ("command", "sig", "code"),
    [
        ("run", signal.SIGTERM, 0),
        ("run", signal.SIGINT, 130),
        ("web", signal.SIGTERM, 0),
    ],
)
def test_a_signal_stops_hookchat_in_bounded_time_after_terminate_and_closing_history(tmp_path, command, sig, code):
    config = _project(tmp_path)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "core.cli", command, "-c", str(config)],
        cwd=tmp_path,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    ready = "tool registry on" if command == "run" else "web console on"
    try:
        said = []
        while not any(ready in line for line in said):  # started
            line = process.stderr.readline()
            assert line, f"hookchat run exited early: {''.join(said)}"
            said.append(line)
        assert any("'m_import_hangs' not loaded" in line and "did not finish" in line for line in said)
        wal = tmp_path / "data" / "history.sqlite3-wal"
        assert wal.exists(), "history is open while the bot runs"

        sent = time.monotonic()
        process.send_signal(sig)
        _, rest = process.communicate(timeout=SHUTDOWN_TIMEOUT + 10)
        took = time.monotonic() - sent
    finally:
        process.kill()
        process.wait()

    assert took < SHUTDOWN_TIMEOUT + 2, f"the shutdown took {took:.1f} s:\n{rest}"
    assert process.returncode == code, rest
    assert (tmp_path / "terminated.txt").read_text() == "terminated", "a terminate() after a stuck one still ran"
    assert "'z_terminate_hangs': terminate() did not end" in rest
    assert not wal.exists(), "history was closed (SQLite folds its WAL back in on close)"
    assert "Traceback" not in rest
