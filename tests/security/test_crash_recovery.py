"""Nothing is lost silently on a crash: a real `hookchat run` process (console adapter, SQLite history, a model
behind a real HTTP server) is killed with SIGKILL mid-conversation and started again. Afterwards every message it
had received was answered (before the kill, or after the restart), and every reply it printed is in history (a
reply sent in the instant before its turn was committed is answered again after the restart: at least once)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
from pathlib import Path

import pytest

from tests.security.processes import SlowModel, read_replies, start_hookchat, write_config

pytestmark = pytest.mark.slow


def _database(data: Path) -> tuple[list[str], list[str]]:
    """(user texts of the stored turns, texts of the inbox) in the history database."""
    with sqlite3.connect(data / "history.sqlite3") as conn:
        turns = [json.loads(row[0]) for row in conn.execute("SELECT messages FROM turns ORDER BY id")]
        inbox = [json.loads(row[0])["text"] for row in conn.execute("SELECT message FROM inbox ORDER BY seq")]
    stored = [m["content"] for t in turns for m in t if m["role"] in ("user", "assistant")]
    return stored, inbox


@pytest.mark.parametrize("kill_after", [2, 5])
def test_after_kill_9_every_received_message_is_answered_and_every_reply_is_in_history(tmp_path, kill_after):
    model = SlowModel(delay=0.2)
    try:
        config = write_config(tmp_path, model.url)
        first = start_hookchat(config)
        sent = [f"message {i}" for i in range(12)]
        first.stdin.write("".join(f"{text}\n" for text in sent))
        first.stdin.flush()
        before: list[str] = []
        read_replies(first, kill_after, before)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)

        stored, unanswered = _database(tmp_path / "data")
        # Every reply the user saw is in history, or (killed between the send and the commit that stores it) its
        # message is still in the inbox and will be answered again: at least once, never zero.
        for reply in before:
            assert any(reply in m for m in stored) or reply.removeprefix("answer: ") in unanswered, (reply, stored)
        received = [m for m in stored if m.startswith("message ")] + unanswered
        assert set(received) >= {f"message {i}" for i in range(kill_after)}

        second = start_hookchat(config)  # stdin stays open while it answers what the crash left
        after: list[str] = []
        read_replies(second, 1 if unanswered else 0, after)
        second.stdin.close()
        second.wait(30)
        stored_after, left = _database(tmp_path / "data")
    finally:
        model.close()

    assert left == []
    answered = before + after
    for text in received:  # answered before the kill, or after the restart (several may share one answer)
        assert any(text in reply for reply in answered), (text, answered)
    assert all(any(reply in m for m in stored_after) for reply in answered), (answered, stored_after)
