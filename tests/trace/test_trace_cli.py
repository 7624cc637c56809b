"""`hookchat trace` and `hookchat chat --trace`, run as a user runs them."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The bot is given an OpenAI-compatible provider nobody listens for, so each turn ends with the error notice: the
# trace of a failed model call is what an operator needs most.
CONFIG = """
[[providers]]
name = "nowhere"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["none"]
timeout = 2
max_retries = 0
"""


def hookchat(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
    )


def test_chat_trace_prints_each_turn_and_trace_reads_them_back(tmp_path):
    (tmp_path / "hookchat.toml").write_text(CONFIG, encoding="utf-8")
    chat = hookchat("chat", "--trace", cwd=tmp_path, stdin="hello there\n/quit\n")
    assert chat.returncode == 0, chat.stderr
    assert "bot> Sorry, I could not get an answer from the model" in chat.stdout
    assert "turn  console:dm:you  'hello there'  error" in chat.stdout
    assert "chat.choose_strategy" in chat.stdout and "model nowhere  " in chat.stdout

    listed = hookchat("trace", "--json", cwd=tmp_path)
    assert listed.returncode == 0, listed.stderr
    [turn] = json.loads(listed.stdout)
    assert turn["kind"] == "turn" and turn["name"] == "hello there"
    text = hookchat("trace", "-n", "1", cwd=tmp_path).stdout
    assert f"trace {turn['id']}" in text
    one = hookchat("trace", "--id", turn["messages"][0]["id"], "--json", cwd=tmp_path)
    assert json.loads(one.stdout)[0]["id"] == turn["id"], "a message's id finds the turn that holds it"
    missing = hookchat("trace", "--id", "nope", cwd=tmp_path)
    assert missing.returncode == 1 and "no trace 'nope'" in missing.stderr
