"""The `hookchat` command, run as a subprocess the way a user runs it."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def hookchat(*args: str, cwd: Path, stdin: str = "", timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "core.cli", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(cwd)},
    )


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A bot folder with a config of its own; the framework's plugins come with the package."""
    (tmp_path / "hookchat.toml").write_text("[plugins.config.chat]\nquiet_seconds = 0.5\n", encoding="utf-8")
    return tmp_path


def test_hooks_prints_the_resolved_order_per_event(project):
    out = hookchat("hooks", "--json", cwd=project)
    assert out.returncode == 0, out.stderr
    chains = json.loads(out.stdout)
    assert chains["im_message"][1] == {
        "plugin_id": "chat",
        "function": "choose_strategy",
        "priority": 100,
        "deadline": 10.0,
    }
    text = hookchat("hooks", cwd=project).stdout
    assert (
        "im_message\n   1. 110              commands.command  (deadline 10 s)\n"
        "   2. SYS_HIGH (100)   chat.choose_strategy  (deadline 10 s)" in text
    )
    events = [line for line in text.splitlines() if line and not line.startswith(" ") and not line.endswith(":")]
    assert events == ["im_message", "message_buffered", "llm_request"], "pipeline order, not alphabetical"
    assert "builtin_tags: tags: <at>, <embed>, <emoji>, <file>, <img>" in text


def test_global_options_work_before_and_after_the_subcommand(project):
    (project / "other.toml").write_text('[plugins]\ndisabled = ["chat", "commands"]\n', encoding="utf-8")
    before = hookchat("-c", "other.toml", "hooks", "--json", cwd=project)
    after = hookchat("hooks", "--json", "-c", "other.toml", "-v", cwd=project)
    assert before.returncode == after.returncode == 0, before.stderr + after.stderr
    assert json.loads(before.stdout) == json.loads(after.stdout)
    assert "im_message" not in json.loads(after.stdout), "the chat and commands plugins are disabled by other.toml"
    assert "INFO hookchat" in after.stderr, "-v after the subcommand counts too"


def test_plugins_lists_status_and_the_reason_of_a_failure(project):
    broken = project / "data" / "plugins" / "broken"
    broken.mkdir(parents=True)
    (broken / "manifest.json").write_text(json.dumps({"plugin_id": "broken", "core_version": ">=99"}))
    (broken / "main.py").write_text("raise SystemExit('never imported')\n")
    out = hookchat("plugins", cwd=project)
    assert out.returncode == 1, "a failed plugin makes the command fail"
    assert "chat" in out.stdout and "loaded" in out.stdout
    assert "broken" in out.stdout and "needs hookchat >=99" in out.stdout


def test_new_plugin_creates_a_skeleton_whose_test_passes(project):
    out = hookchat("new-plugin", "greeter", cwd=project)
    assert out.returncode == 0, out.stderr
    folder = project / "data" / "plugins" / "greeter"
    assert {p.name for p in folder.iterdir()} >= {"manifest.json", "schema.json", "main.py", "tests"}
    test = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder / "tests")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert test.returncode == 0, test.stdout + test.stderr
    listed = hookchat("plugins", "--json", cwd=project)
    greeter = next(p for p in json.loads(listed.stdout) if p["plugin_id"] == "greeter")
    assert greeter["state"] == "loaded" and greeter["tools"] == ["greeter_add"] and greeter["tags"] == ["shout"]


def test_an_invalid_config_file_names_the_key_and_the_reason(project):
    (project / "hookchat.toml").write_text("[limits]\nmax_steps = 0\n", encoding="utf-8")
    out = hookchat("hooks", cwd=project)
    assert out.returncode == 2
    assert "limits.max_steps" in out.stderr and "greater than 0" in out.stderr


@pytest.mark.slow
def test_chat_talks_to_the_embedded_model_through_the_whole_pipeline(project):
    pytest.importorskip("xllamacpp")
    out = hookchat("chat", cwd=project, stdin="Hello!\n/quit\n", timeout=300)
    assert out.returncode == 0, out.stderr
    assert "loading while you type" in out.stderr, "the prompt comes first and says the model is still loading"
    reply = [line for line in out.stdout.split("you> ") if line.startswith("bot> ")]
    assert reply and len(reply[0].strip()) > len("bot> ")


def test_run_refuses_an_unknown_adapter_type_by_name(project):
    (project / "hookchat.toml").write_text('[[adapters.instances]]\ntype = "irc"\n', encoding="utf-8")
    out = hookchat("run", cwd=project)
    assert out.returncode == 2
    assert "unknown adapter type 'irc'" in out.stderr and "console" in out.stderr


@pytest.mark.slow
def test_ctrl_c_at_the_chat_prompt_ends_the_process(project):
    """The terminal's input stays open (nobody typed anything): Ctrl-C must still end `hookchat chat`."""
    pytest.importorskip("xllamacpp")
    chat = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "chat"],
        cwd=project,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(project)},
    )
    try:
        assert chat.stdout.read(len("you> ")) == "you> ", "the prompt is shown"
        chat.send_signal(signal.SIGINT)
        assert chat.wait(timeout=60) == 0
    finally:
        chat.kill()
        chat.wait()
