"""Poison messages, through real processes: a plugin whose `llm_request` hook calls `os._exit(1)` (which nothing in
the process can catch) for one message ends `hookchat run` at every turn for it. Each start counts an attempt
before the turn; once `[limits] message_attempts` (3) are used, the next start stays up, sets the message aside
(kept, not replayed), tells its sender, and `hookchat status` lists it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.security.processes import ROOT, SlowModel, read_replies, start_hookchat, write_config

pytestmark = pytest.mark.slow

BOMB = """
import os

from core.plugin import BasePlugin, on


class Bomb(BasePlugin):
    @on.llm_request()
    async def explode(self, event, req, tag_set, *args, **kwargs):
        if any("boom" in m.message_str for m in event.messages):
            os._exit(1)
"""


def _bomb_plugin(root: Path) -> None:
    folder = root / "plugins" / "bomb"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps(
            {
                "plugin_id": "bomb",
                "display_name": "Bomb",
                "version": "0.1.0",
                "author": "tests",
                "description": "ends the process on one message",
                "core_version": ">=0.1",
            }
        )
    )
    (folder / "main.py").write_text(BOMB)


def _status(config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", "status", "-c", str(config), *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )


def test_a_message_that_ends_the_process_is_set_aside_after_its_attempts_and_its_sender_told(tmp_path):
    _bomb_plugin(tmp_path)
    model = SlowModel(delay=0)
    try:
        config = write_config(tmp_path, model.url, plugin_dirs=["plugins"])
        first = start_hookchat(config)
        first.stdin.write("boom, please\n")
        first.stdin.flush()
        assert first.wait(60) == 1, "the plugin ended the process"
        for _ in range(2):  # attempts 2 and 3: each start answers what the crash left, and ends again
            again = start_hookchat(config)
            assert again.wait(60) == 1
            again.stdin.close()
        status = json.loads(_status(config, "--json").stdout)
        assert status["waiting"] == 1 and status["poison"] == []

        last = start_hookchat(config)  # attempts used: this one stays up
        try:
            replies: list[str] = []
            read_replies(last, 1, replies)
            [notice] = replies
            assert "stopped trying" in notice and "boom, please" in notice
            last.stdin.write("hello\n")
            last.stdin.flush()
            read_replies(last, 2, replies)
            assert replies[1] == "answer: hello"

            listed = json.loads(_status(config, "--json").stdout)
            [poison] = listed["poison"]
            assert listed["waiting"] == 0
            assert poison["text"] == "boom, please" and poison["attempts"] == 3 and poison["sid"] == "console:dm:you"
            text = _status(config)
            assert text.returncode == 0 and "1 set aside as poison" in text.stdout and "boom, please" in text.stdout
        finally:
            last.stdin.close()
            assert last.wait(30) == 0
        again = start_hookchat(config)  # set aside for good: nothing is replayed, nothing said
        again.stdin.close()
        assert again.wait(30) == 0 and "bot> " not in again.stdout.read()
    finally:
        model.close()
