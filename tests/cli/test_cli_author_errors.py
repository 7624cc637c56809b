"""Mistakes a new plugin author makes, as the `hookchat` command reports them: a plugin folder without a manifest is
named with the missing file and fails `hookchat plugins`; listing plugins and hooks needs no API key."""

import json
from pathlib import Path

from tests.cli.test_cli import hookchat

CONFIG = """
[[providers]]
name = "main"
type = "openai"
base_url = "http://127.0.0.1:9/v1"
models = ["m"]
api_key_env = "HOOKCHAT_TEST_UNSET_KEY"
"""


def test_plugins_and_hooks_need_no_api_key_and_a_folder_without_manifest_fails_by_name(tmp_path: Path):
    (tmp_path / "hookchat.toml").write_text(CONFIG, encoding="utf-8")
    weather = tmp_path / "plugins" / "weather"
    weather.mkdir(parents=True)
    (weather / "main.py").write_text("from core.plugin import BasePlugin\n\n\nclass Weather(BasePlugin):\n    pass\n")

    listed = hookchat("plugins", "--json", cwd=tmp_path)
    assert listed.returncode == 1, listed.stderr
    [status] = [s for s in json.loads(listed.stdout) if s["plugin_id"] == "weather"]
    assert status["state"] == "error"
    assert str(weather) in status["reason"] and "no manifest.json" in status["reason"]
    assert '"plugin_id": "weather"' in status["reason"], "the fix, spelled out"

    hooks = hookchat("hooks", "--json", cwd=tmp_path)
    assert hooks.returncode == 0, hooks.stderr
    assert "im_message" in json.loads(hooks.stdout)

    run = hookchat("run", cwd=tmp_path, timeout=60)
    assert run.returncode == 2 and "HOOKCHAT_TEST_UNSET_KEY" in run.stderr, (
        "a command that calls the model still refuses"
    )


def test_a_bad_setting_of_a_builtin_plugin_stops_the_bot_at_start_naming_the_key(tmp_path: Path):
    (tmp_path / "hookchat.toml").write_text("[plugins.config.chat]\nquiet_seconds = -1\n", encoding="utf-8")
    run = hookchat("run", cwd=tmp_path, timeout=60)
    assert run.returncode == 2
    assert "[plugins.config.chat]" in run.stderr and "'quiet_seconds': -1 is less than the minimum of 0" in run.stderr
