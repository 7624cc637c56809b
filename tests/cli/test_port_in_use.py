"""A port another process holds: `hookchat run` and `hookchat web` exit with one line that names the address and
the config key that sets it, exit status 2, and no traceback."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def taken_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


@pytest.mark.parametrize(("command", "key"), [(["run"], "server.port"), (["web"], "web.port")])
def test_a_port_in_use_is_one_line_naming_the_port_and_its_config_key(tmp_path, taken_port, command, key):
    ports = {"server": 0, "web": 0, key.split(".")[0]: taken_port}
    (tmp_path / "hookchat.toml").write_text(f"""
[data]
dir = "data"
[plugins]
dirs = []
[adapters]
console = false
[[providers]]
name = "unused"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
[server]
port = {ports["server"]}
token = "t"
[web]
port = {ports["web"]}
""")
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", *command],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )

    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [line for line in done.stderr.splitlines() if line.startswith("hookchat:")]
    assert f"127.0.0.1:{taken_port}" in line and "in use" in line and f"set {key}" in line
