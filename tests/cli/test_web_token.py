"""`hookchat web` as a user runs it: it prints the console's address once, with the token it generated into the data
directory (`?token=`), and that address logs a browser in; without the token nothing is served. `hookchat run`
with a OneBot reverse listener beyond loopback and no token exits with one line naming the option."""

from __future__ import annotations

import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]
CONFIG = """
[[providers]]
name = "nowhere"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
"""


def start(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
    )


def test_hookchat_web_prints_its_token_url_once_and_keeps_the_token_private(tmp_path: Path) -> None:
    (tmp_path / "hookchat.toml").write_text(CONFIG, encoding="utf-8")
    bot = start("web", "--port", "0", cwd=tmp_path)
    try:
        assert bot.stderr is not None
        for line in bot.stderr:
            found = re.search(r"web console on (http://127\.0\.0\.1:\d+)/\?token=([\w-]+)", line)
            if found:
                break
        else:
            raise AssertionError("no console address was printed")
        base, token = found.group(1), found.group(2)
        path = tmp_path / "data" / "web" / "token"
        assert path.read_text().strip() == token and stat.S_IMODE(path.stat().st_mode) == 0o600
        assert httpx.get(f"{base}/api/plugins").status_code == 401
        login = httpx.get(f"{base}/?token={token}")
        assert login.status_code == 303 and f"hookchat_token={token}" in login.headers["set-cookie"]
        assert httpx.get(f"{base}/api/plugins", cookies={"hookchat_token": token}).status_code == 200
    finally:
        bot.send_signal(signal.SIGINT)
        try:
            _, err = bot.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            bot.kill()
            _, err = bot.communicate()
    assert token not in err, "printed once, never logged"


def test_hookchat_run_refuses_a_public_onebot_listener_without_a_token_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "hookchat.toml").write_text(
        CONFIG
        + """
[adapters]
console = false

[[adapters.instances]]
type = "onebot"
name = "qq"
options = { mode = "reverse", host = "0.0.0.0", port = 0 }
""",
        encoding="utf-8",
    )
    done = subprocess.run(
        [sys.executable, "-m", "core.cli", "run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path)},
    )
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert "options.token_env" in done.stderr and "'qq'" in done.stderr
