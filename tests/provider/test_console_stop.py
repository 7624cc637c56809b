"""Stopped means done, in a real terminal: `hookchat chat` on the embedded model runs in tmux; the user types a
message, presses Ctrl-C while the answer is being written, and quits. The message left the inbox, so the next
start answers nothing: no reply is printed, no turn stored, nothing waits. (It lives beside the `embedded_model`
fixture, which skips or, in CI, fails when the model is not installed.)"""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.provider.conftest import ROOT

pytestmark = pytest.mark.slow


class Terminal:
    """One tmux session running a command in a 160x50 window; its screen is read with `screen()`."""

    def __init__(self, command: str, cwd: Path) -> None:
        self.name = f"hookchat-test-{uuid.uuid4().hex[:8]}"
        subprocess.run(
            ["tmux", "new-session", "-d", "-s", self.name, "-x", "160", "-y", "50", "-c", str(cwd), command], check=True
        )
        subprocess.run(["tmux", "set-option", "-t", self.name, "remain-on-exit", "on"], check=True)

    def screen(self) -> str:
        return subprocess.run(
            ["tmux", "capture-pane", "-p", "-S", "-200", "-t", self.name], capture_output=True, text=True, check=True
        ).stdout

    def keys(self, *keys: str) -> None:
        subprocess.run(["tmux", "send-keys", "-t", self.name, *keys], check=True)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            screen = self.screen()
            if text in screen:
                return screen
            time.sleep(0.1)
        raise AssertionError(f"{text!r} never appeared on the screen:\n{self.screen()}")

    def exited(self, timeout: float = 60) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            dead = subprocess.run(
                ["tmux", "display-message", "-p", "-t", self.name, "#{pane_dead}"], capture_output=True, text=True
            ).stdout.strip()
            if dead == "1":
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        subprocess.run(["tmux", "kill-session", "-t", self.name], capture_output=True)


def _database(data: Path) -> tuple[list[str], list[str]]:
    """(the user messages of the stored turns, the texts waiting in the inbox)."""
    with sqlite3.connect(data / "history.sqlite3") as conn:
        turns = [json.loads(row[0]) for row in conn.execute("SELECT messages FROM turns")]
        inbox = [json.loads(row[0])["text"] for row in conn.execute("SELECT message FROM inbox")]
    return [m["content"] for t in turns for m in t if m["role"] == "user"], inbox


def test_ctrl_c_during_an_answer_then_a_restart_replays_nothing(tmp_path, embedded_model):
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (.ci/run installs it)")
    (tmp_path / "hookchat.toml").write_text('[data]\ndir = "data"\n[plugins]\ndirs = []\n')
    command = f"env PYTHONPATH={ROOT} {sys.executable} -m core.cli chat -c hookchat.toml"
    first = Terminal(command, tmp_path)
    try:
        first.wait_for("you>")
        first.keys("Write a very long story about a dragon and a knight, in ten chapters.", "Enter")
        first.wait_for("bot", timeout=180)  # the typing indicator, then the answer as it is written
        first.keys("C-c")
        first.wait_for("(answer stopped)")
        first.keys("/quit", "Enter")
        assert first.exited(), first.screen()
    finally:
        first.close()
    asked, waiting = _database(tmp_path / "data")
    assert waiting == [] and not any("dragon" in m for m in asked), "the stopped answer is done"

    second = Terminal(command, tmp_path)
    try:
        second.wait_for("you>")
        second.keys("/quit", "Enter")
        assert second.exited(), second.screen()
        screen = second.screen()
    finally:
        second.close()
    assert "bot>" not in screen and "bot is typing" not in screen, screen
    asked, waiting = _database(tmp_path / "data")
    assert waiting == [] and asked == [], "nothing was answered again"
