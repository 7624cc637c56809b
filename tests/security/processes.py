"""Helpers of the security tests that run a real `hookchat run` process: a model behind a real HTTP server on
loopback (`SlowModel`), a config for it (`write_config`), the process (`start_hookchat`) and its console replies
(`read_replies`)."""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


class SlowModel:
    """An OpenAI-compatible `/v1/chat/completions` on loopback: answers `<msg>answer: <user text></msg>` after
    `delay` seconds, streamed or not, so a kill lands while turns are in flight."""

    def __init__(self, delay: float) -> None:
        owner = self
        self.delay = delay

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                user = [m for m in body["messages"] if m["role"] == "user"][-1]["content"]
                time.sleep(owner.delay)
                text = f"<msg>answer: {user}</msg>"
                if body.get("stream"):
                    events = [{"content": text, "role": "assistant"}, None]
                    payload = (
                        "".join(
                            "data: "
                            + json.dumps(
                                {
                                    "id": "c",
                                    "object": "chat.completion.chunk",
                                    "created": 1,
                                    "model": "m",
                                    "choices": [{"index": 0, "delta": d or {}, "finish_reason": None if d else "stop"}],
                                }
                            )
                            + "\n\n"
                            for d in events
                        )
                        + "data: [DONE]\n\n"
                    )
                    self._reply(payload.encode(), "text/event-stream")
                else:
                    self._reply(
                        json.dumps(
                            {
                                "id": "c",
                                "object": "chat.completion",
                                "created": 1,
                                "model": "m",
                                "choices": [
                                    {
                                        "index": 0,
                                        "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": text},
                                    }
                                ],
                            }
                        ).encode(),
                        "application/json",
                    )

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


def write_config(tmp_path: Path, model_url: str, *, plugin_dirs: Sequence[str] = (), extra: str = "") -> Path:
    """A `hookchat.toml` in `tmp_path`: data in `data/`, the plugin folders `plugin_dirs` (default none), the model
    at `model_url`, a tool registry on a free port; `extra` is appended (more TOML)."""
    config = tmp_path / "hookchat.toml"
    config.write_text(
        f"""
[data]
dir = "data"
[plugins]
dirs = {json.dumps(list(plugin_dirs))}
[[providers]]
name = "fake"
type = "openai"
base_url = "{model_url}"
models = ["m"]
max_retries = 0
[server]
port = 0
token = "t"
"""
        + extra
    )
    return config


def start_hookchat(config: Path) -> subprocess.Popen:
    """`hookchat run -c config` in its own process, its console on pipes (text)."""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(config.parent), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "core.cli", "run", "-c", str(config)],
        cwd=config.parent,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )


def read_replies(process: subprocess.Popen, until: int, replies: list[str], timeout: float = 60) -> None:
    """Read `bot>` lines into `replies` until there are `until` of them."""
    deadline = time.monotonic() + timeout
    while len(replies) < until:
        assert time.monotonic() < deadline, f"only {len(replies)} replies: {replies}"
        line = process.stdout.readline()
        assert line, f"the bot exited after {replies}"
        for part in line.split("you> "):
            if part.startswith("bot> "):
                replies.append(part[5:].strip())
