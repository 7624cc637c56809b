"""Errors that point at the fix: a broken plugin's status names the file, the line, the source and what to write
instead; problems that do not stop a plugin (a duplicate id, a misspelt manifest key, config for a plugin that is
not there) are warnings naming the file and the nearest valid name."""

from __future__ import annotations

import logging

import pytest

from core.builtins import builtin_plugins_dir
from core.plugin import PluginLoader
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


async def test_a_misspelt_event_names_the_line_and_the_event_meant(manager, write_plugin):
    folder = write_plugin(
        "typo",
        """
        from core.plugin import BasePlugin, on

        class Typo(BasePlugin):
            @on.im_mesage()
            async def hello(self, event, *args, **kwargs):
                pass
    """,
    )
    status = await manager.load_all()
    reason = next(s for s in status if s.plugin_id == "typo").reason
    assert f"{folder / 'main.py'}:5: '@on.im_mesage()'" in reason
    assert "did you mean on.im_message?" in reason


async def test_a_syntax_error_names_the_file_line_and_source(manager, write_plugin):
    folder = write_plugin(
        "broken",
        """
        from core.plugin import BasePlugin

        class Broken(BasePlugin)
            pass
    """,
    )
    (status,) = await manager.load_all()
    assert status.state == "error"
    assert f"{folder / 'main.py'}:4: 'class Broken(BasePlugin)'" in status.reason
    assert "SyntaxError" in status.reason


async def test_a_hook_that_cannot_take_its_events_arguments_is_refused_at_load(manager, write_plugin):
    write_plugin(
        "narrow",
        """
        from core.plugin import BasePlugin, on

        class Narrow(BasePlugin):
            @on.llm_request()
            async def inject(self, event):
                pass
    """,
    )
    (status,) = await manager.load_all()
    assert status.state == "error"
    assert "cannot take the arguments of llm_request" in status.reason
    assert "async def inject(self, event, req, tag_set, *args, **kwargs)" in status.reason
    assert "main.py:5" in status.reason, "it names where the hook is"


async def test_a_second_plugin_with_the_same_id_is_refused_naming_both_folders(make_manager, tmp_path, caplog):
    roots = [tmp_path / "first", tmp_path / "second"]
    for root in roots:
        folder = root / "twin"
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text('{"plugin_id": "twin"}')
        (folder / "main.py").write_text("from core.plugin import BasePlugin\nclass Twin(BasePlugin):\n    pass\n")
    manager = make_manager(plugin_dirs=roots)
    with caplog.at_level(logging.WARNING, logger="hookchat"):
        (status,) = await manager.load_all()
    assert status.state == "loaded" and status.origin == str(roots[0] / "twin")
    (warning,) = status.warnings
    assert str(roots[0] / "twin") in warning and str(roots[1] / "twin") in warning
    assert warning in caplog.text


async def test_an_unknown_manifest_key_is_a_warning_with_the_nearest_key(manager, write_plugin):
    folder = write_plugin(
        "sloppy",
        "from core.plugin import BasePlugin\nclass Sloppy(BasePlugin):\n    pass\n",
        manifest={"core_versoin": ">=99"},
    )
    (status,) = await manager.load_all()
    assert status.state == "loaded"
    assert status.warnings == [
        f"{folder / 'manifest.json'}: unknown manifest key 'core_versoin': did you mean 'core_version'?"
    ]


async def test_config_for_a_plugin_that_is_not_there_is_a_warning_with_the_nearest_id(caplog):
    config = {"plugins": {"config": {"chatt": {"flush_messages": 1}}}}
    with caplog.at_level(logging.WARNING, logger="hookchat"):
        async with ChatHarness(provider=ScriptedProvider([]), config=config):
            pass
    assert "[plugins.config.chatt] configures no plugin that was found: did you mean 'chat'?" in caplog.text


async def test_a_plugin_with_a_built_in_plugins_id_replaces_it(make_manager, write_plugin):
    folder = write_plugin("chat", "from core.plugin import BasePlugin\nclass MyChat(BasePlugin):\n    pass\n")
    manager: PluginLoader = make_manager(builtins=("chat", "builtin_tags"))
    statuses = {s.plugin_id: s for s in await manager.load_all()}
    assert statuses["chat"].origin == str(folder) and statuses["chat"].warnings == []
    assert statuses["builtin_tags"].origin == str(builtin_plugins_dir() / "builtin_tags")
