"""Bad configuration gets a clear `ConfigError`, never a traceback: every unusable `data.dir` and a TOML file
nested too deeply; plugin ids `.` and `..`, which would name a directory above the plugin's own, are refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from core.config import ConfigError, load_config
from core.plugin import Manifest, PluginLoader

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "value, reason",
    [
        ('""', "must name a directory"),
        ('"a\\u0000b"', "must name a directory"),
        ('"taken.txt"', "is a file, not a directory"),
        ('"taken.txt/data"', "is a file, not a directory"),
        ("1", "data.dir"),
        ('"/proc"', "no file can be created in /proc"),  # a directory, and root passes every permission check
        ('"/proc/hookchat"', "no file can be created in /proc"),
    ],
)
def test_an_unusable_data_dir_is_a_config_error(tmp_path: Path, value: str, reason: str) -> None:
    (tmp_path / "taken.txt").write_text("a file")
    (tmp_path / "hookchat.toml").write_text(f"[data]\ndir = {value}\n")

    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path / "hookchat.toml", env={})

    assert "data.dir" in str(caught.value) and reason in str(caught.value)


def test_a_deeply_nested_toml_array_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "hookchat.toml").write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")

    with pytest.raises(ConfigError, match="nested too deeply"):
        load_config(tmp_path / "hookchat.toml", env={})


@pytest.mark.parametrize("plugin_id", [".", ".."])
def test_dot_plugin_ids_are_refused(plugin_id: str) -> None:
    with pytest.raises(ValidationError, match="cannot be a plugin id"):
        Manifest(plugin_id=plugin_id)


async def test_a_plugin_folder_claiming_id_dotdot_is_reported_and_gets_no_data_dir(tmp_path: Path) -> None:
    folder = tmp_path / "plugins" / "sneaky"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"plugin_id": ".."}))
    (folder / "main.py").write_text("from core.plugin import BasePlugin\nclass P(BasePlugin):\n    pass\n")
    loader = PluginLoader(plugin_dirs=[tmp_path / "plugins"], data_dir=tmp_path / "data", entry_points=False)

    statuses = await loader.load_all()

    assert [(s.state, "cannot be a plugin id" in (s.reason or "")) for s in statuses] == [("error", True)]
    assert loader.loaded_ids() == []
    await loader.engine.aclose()
