"""Nothing is lost silently on a crash: a real `hookchat run` process (console adapter, SQLite history, a model
behind a real HTTP server) is killed with SIGKILL mid-conversation and started again. Afterwards every message it
had received was answered (before the kill, or after the restart), and every reply it printed is in history (a
reply sent in the instant before its turn was committed is answered again after the restart: at least once)."""

from __future__ import annotations

import http.server
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


class SlowModel:
    """An OpenAI-compatible `/v1/chat/completions` on loopback: answers `<msg>answer: <user text></msg>` after
    `delay` seconds, streamed or not, so a kill lands while turns are in flight."""

    def __init__(self, delay: float) -> None:
        owner = self
        self.delay = delay

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
                time.sleep(owner.delay)
                text = f"<msg>answer: {user}</msg>"
                if body.get("stream"):
                    events = [{"content": text, "role": "assistant"}, None]
                    payload = "".join(
                        "data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
                                               "choices": [{"index": 0, "delta": d or {},
                                                            "finish_reason": None if d else "stop"}]}) + "\n\n"
                        for d in events) + "data: [DONE]\n\n"
                    self._reply(payload.encode(), "text/event-stream")
                else:
                    self._reply(json.dumps({"id": "c", "object": "chat.completion", "created": 1, "model": "m",
                                            "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                                "role": "assistant", "content": text}}]}).encode(),
                                "application/json")

            def _reply(self, data: bytes, kind: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _config(tmp_path: Path, model_url: str) -> Path:
    config = tmp_path / "hookchat.toml"
    config.write_text(f"""
[data]
dir = "data"
[plugins]
dirs = []
[[providers]]
name = "fake"
type = "openai"
base_url = "{model_url}"
models = ["m"]
max_retries = 0
[server]
port = 0
token = "t"
""")
    return config


def _start(config: Path) -> subprocess.Popen:
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(config.parent), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "core.cli", "run", "-c", str(config)], cwd=config.parent,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)


def _replies(process: subprocess.Popen, until: int, replies: list[str], timeout: float = 60) -> None:
    """Read `bot>` lines into `replies` until there are `until` of them."""
    deadline = time.monotonic() + timeout
    while len(replies) < until:
        assert time.monotonic() < deadline, f"only {len(replies)} replies: {replies}"
        line = process.stdout.readline()
        assert line, f"the bot exited after {replies}"
        for part in line.split("you> "):
            if part.startswith("bot> "):
                replies.append(part[5:].strip())


def _database(data: Path) -> tuple[list[str], list[str]]:
    """(user texts of the stored turns, texts of the inbox) in the history database."""
    with sqlite3.connect(data / "history.sqlite3") as conn:
        turns = [json.loads(row[0]) for row in conn.execute("SELECT messages FROM turns ORDER BY id")]
        inbox = [json.loads(row[0])["text"] for row in conn.execute("SELECT message FROM inbox ORDER BY id")]
    stored = [m["content"] for t in turns for m in t if m["role"] in ("user", "assistant")]
    return stored, inbox


@pytest.mark.parametrize("kill_after", [2, 5])
def test_after_kill_9_every_received_message_is_answered_and_every_reply_is_in_history(tmp_path, kill_after):
    model = SlowModel(delay=0.2)
    try:
        config = _config(tmp_path, model.url)
        first = _start(config)
        sent = [f"message {i}" for i in range(12)]
        first.stdin.write("".join(f"{text}\n" for text in sent))
        first.stdin.flush()
        before: list[str] = []
        _replies(first, kill_after, before)
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)

        stored, unanswered = _database(tmp_path / "data")
        # Every reply the user saw is in history, or (killed between the send and the commit that stores it) its
        # message is still in the inbox and will be answered again: at least once, never zero.
        for reply in before:
            assert any(reply in m for m in stored) or reply.removeprefix("answer: ") in unanswered, (reply, stored)
        received = [m for m in stored if m.startswith("message ")] + unanswered
        assert set(received) >= {f"message {i}" for i in range(kill_after)}

        second = _start(config)  # stdin stays open while it answers what the crash left
        after: list[str] = []
        _replies(second, 1 if unanswered else 0, after)
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
