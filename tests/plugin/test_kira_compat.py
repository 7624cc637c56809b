"""Plugins written for KiraAI load unchanged: their `schema.json` field types (`list`, `enum`, `switch`, `markdown`,
`section`, ...) give the `cfg` KiraAI would give, nested sections included; the operator's values are checked per
field; a field type hookchat does not know passes with a warning; and a `core_version` counted in KiraAI's versions
is checked against the KiraAI plugin API hookchat implements."""

from __future__ import annotations

import logging
from typing import Any

import pytest

import core
from core.plugin import KIRA_API_VERSION, PluginLoader

pytestmark = pytest.mark.anyio

# A plugin as KiraAI plugins are written: `__init__(ctx, cfg)` reads its settings, sections as nested dicts.
KIRA_PLUGIN = """
    from core.plugin import BasePlugin, Priority, on
    from core.chat.message_utils import KiraMessageEvent


    class ReminderLike(BasePlugin):
        def __init__(self, ctx, cfg: dict):
            super().__init__(ctx, cfg)
            self.received = cfg
            self.mode = cfg.get("advanced_config", {}).get("autonomy_mode")

        async def initialize(self):
            pass

        async def terminate(self):
            pass

        @on.im_message(priority=Priority.HIGH)
        async def watch(self, event: KiraMessageEvent, *args, **kwargs):
            pass
"""

# The manifest keys KiraAI plugins carry, with a core_version in KiraAI's numbering.
KIRA_MANIFEST = {
    "plugin_id": "reminder_like",
    "display_name": "Reminder",
    "version": "2.2.0",
    "author": "tests",
    "description": "Reminders, written against KiraAI's plugin API",
    "repo": "https://example.invalid/reminder_like",
    "core_version": ">=2.23.0",
    "tags": ["reminder", "schedule"],
    "icon": "icon.png",
    "locales": {"zh": {"display_name": "提醒", "description": "提醒插件"}},
}

# KiraAI's field types, with the WebUI keys (name, hint, locales, collapsed, model_type, level) they come with.
KIRA_SCHEMA: dict[str, Any] = {
    "trusted_users": {
        "name": "Trusted users",
        "type": "list",
        "default": [],
        "hint": "one adapter:user id per line",
        "locales": {"zh": {"name": "授权用户", "hint": "一行一个"}},
    },
    "create_policy": {
        "name": "Who may create reminders",
        "type": "enum",
        "options": ["admins", "mentioned", "everyone"],
        "default": "admins",
    },
    "enabled": {"name": "Enabled", "type": "switch", "default": True},
    "daily_count": {"name": "Checks per day", "type": "integer", "default": 1, "minimum": 0},
    "probability": {"name": "Probability", "type": "float", "default": 0.25},
    "api_key": {"name": "API key", "type": "sensitive", "default": ""},
    "summary_prefix": {"name": "Summary prefix", "type": "text", "default": "[summary]"},
    "model": {"name": "Model", "type": "model_select", "model_type": "llm", "default": None},
    "notice": {"name": "Note", "type": "info", "level": "warning", "hint": "shown in the WebUI, stores nothing"},
    "advanced_config": {
        "name": "Advanced",
        "type": "section",
        "collapsed": True,
        "hint": "rarely needed",
        "locales": {"zh": {"name": "高级配置"}},
        "fields": {
            "autonomy_mode": {
                "name": "Mode",
                "type": "enum",
                "options": ["off", "observe", "plan_only"],
                "default": "plan_only",
            },
            "reflection_hour": {"name": "Hour", "type": "integer", "default": 10},
            "usage_prompt": {"name": "Prompt", "type": "markdown", "default": "Use the reminder tools when asked."},
            "allowed_tools": {"name": "Tools", "type": "list", "default": ["set_reminder", "list_reminders"]},
        },
    },
}

KIRA_DEFAULTS = {
    "trusted_users": [],
    "create_policy": "admins",
    "enabled": True,
    "daily_count": 1,
    "probability": 0.25,
    "api_key": "",
    "summary_prefix": "[summary]",
    "model": None,
    "advanced_config": {
        "autonomy_mode": "plan_only",
        "reflection_hour": 10,
        "usage_prompt": "Use the reminder tools when asked.",
        "allowed_tools": ["set_reminder", "list_reminders"],
    },
}


def write_kira_plugin(write_plugin, folder: str = "reminder_like", **manifest: Any) -> None:
    write_plugin(folder, KIRA_PLUGIN, manifest={**KIRA_MANIFEST, "plugin_id": folder, **manifest}, schema=KIRA_SCHEMA)


async def test_a_kiraai_plugin_loads_and_gets_the_defaults_as_kiraai_builds_them(
    manager: PluginLoader, write_plugin
) -> None:
    write_kira_plugin(write_plugin)

    await manager.load_all()

    status = manager.status("reminder_like")
    assert status.state == "loaded", status.reason
    plugin = manager.get_plugin("reminder_like")
    assert plugin.received == plugin.cfg == plugin.ctx.config == KIRA_DEFAULTS
    assert "notice" not in plugin.cfg, "an info field stores no value"
    assert plugin.mode == "plan_only"
    assert plugin.ctx.metadata["tags"] == ["reminder", "schedule"] and plugin.ctx.metadata["repo"]


async def test_the_operators_values_overlay_the_defaults_inside_a_section_field_by_field(
    make_manager, write_plugin
) -> None:
    write_kira_plugin(write_plugin)
    values = {"daily_count": 3, "trusted_users": ["qq:42"], "advanced_config": {"autonomy_mode": "observe"}}
    manager = make_manager(plugin_config={"reminder_like": values})

    await manager.load_all()

    plugin = manager.get_plugin("reminder_like")
    assert plugin.cfg["daily_count"] == 3 and plugin.cfg["trusted_users"] == ["qq:42"]
    assert plugin.cfg["advanced_config"] == {**KIRA_DEFAULTS["advanced_config"], "autonomy_mode": "observe"}
    assert plugin.mode == "observe"


async def test_defaults_follow_kiraais_rules_for_missing_and_unfitting_defaults(
    manager: PluginLoader, write_plugin
) -> None:
    write_plugin(
        "rules",
        KIRA_PLUGIN,
        schema={
            "quiet": {"type": "switch"},  # no default: False
            "words": {"type": "list", "default": "hello"},  # not a list: []
            "level": {"type": "enum", "options": ["low", "high"], "default": "medium"},  # not an option: the first
            "style": {"type": "string", "options": ["plain", "fancy"]},  # a dropdown without default: the first
            "headers": {"type": "json"},  # no default: {}
            "limit": {"type": "integer"},  # no default: None
            "skills_dir": {"type": "string", "default": None},  # None is "not set", whatever the type
            "untyped": {"default": "kept"},  # no type: a string
        },
    )

    await manager.load_all()

    assert manager.get_plugin("rules").cfg == {
        "quiet": False,
        "words": [],
        "level": "low",
        "style": "plain",
        "headers": {},
        "limit": None,
        "skills_dir": None,
        "untyped": "kept",
    }


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"enabled": "yes"}, "'enabled'"),
        ({"daily_count": "two"}, "'daily_count'"),
        ({"daily_count": -1}, "'daily_count'"),
        ({"probability": "high"}, "'probability'"),
        ({"create_policy": "anyone"}, "'create_policy'"),
        ({"trusted_users": "qq:42"}, "'trusted_users'"),
        ({"advanced_config": {"autonomy_mode": "always"}}, "'advanced_config.autonomy_mode'"),
        ({"advanced_config": "off"}, "'advanced_config'"),
        ({"advanced_config": {"autonomy": "off"}}, "'advanced_config.autonomy'"),
        ({"enable": True}, "'enable'"),
    ],
    ids=[
        "switch",
        "integer",
        "minimum",
        "float",
        "enum",
        "list",
        "enum in a section",
        "section not a table",
        "unknown field in a section",
        "unknown field",
    ],
)
async def test_a_bad_value_is_an_error_naming_the_plugin_and_the_field(
    make_manager, write_plugin, values: dict[str, Any], field: str
) -> None:
    write_kira_plugin(write_plugin)
    write_plugin("echo", "from core.plugin import BasePlugin\n\nclass Echo(BasePlugin):\n    pass\n")
    manager = make_manager(plugin_config={"reminder_like": values})

    await manager.load_all()

    status = manager.status("reminder_like")
    assert status.state == "error"
    assert "plugin 'reminder_like'" in status.reason and field in status.reason
    assert manager.status("echo").state == "loaded"


async def test_a_field_of_an_unknown_type_loads_with_a_warning_naming_the_plugin_and_the_field(
    make_manager, write_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin(
        "palette",
        KIRA_PLUGIN,
        schema={
            "accent": {"name": "Accent colour", "type": "color_picker", "default": "#ffcc00"},
            "size": {"type": "integer", "default": 1},
        },
    )
    manager = make_manager(plugin_config={"palette": {"accent": [255, 204, 0]}})

    with caplog.at_level(logging.WARNING, logger="hookchat"):
        await manager.load_all()

    assert manager.status("palette").state == "loaded"
    assert manager.get_plugin("palette").cfg == {"accent": [255, 204, 0], "size": 1}
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any("'palette'" in w and "'accent'" in w and "'color_picker'" in w for w in warnings), warnings


async def test_a_default_that_does_not_fit_its_type_is_a_warning_not_an_error(
    manager: PluginLoader, write_plugin, caplog: pytest.LogCaptureFixture
) -> None:
    write_plugin("sloppy", KIRA_PLUGIN, schema={"retries": {"type": "integer", "default": "3"}})

    with caplog.at_level(logging.WARNING, logger="hookchat"):
        await manager.load_all()

    assert manager.get_plugin("sloppy").cfg == {"retries": "3"}
    assert any("'sloppy'" in r.getMessage() and "'retries'" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    ("core_version", "satisfied_by"),
    [(">=2.23.0", f"KiraAI plugin API {KIRA_API_VERSION}"), (">=0.1,<1", f"hookchat {core.__version__}")],
    ids=["KiraAI's numbering", "hookchat's numbering"],
)
async def test_core_version_is_satisfied_by_hookchat_or_by_the_kiraai_api_it_implements_and_the_status_says_which(
    manager: PluginLoader, write_plugin, core_version: str, satisfied_by: str
) -> None:
    write_kira_plugin(write_plugin, core_version=core_version)

    await manager.load_all()

    status = manager.status("reminder_like")
    assert status.state == "loaded", status.reason
    assert core_version in status.compat and satisfied_by in status.compat


@pytest.mark.parametrize("core_version", [">=99", ">=2.34.6"], ids=["neither", "a newer KiraAI"])
async def test_a_core_version_neither_satisfies_is_refused_with_its_reason(
    manager: PluginLoader, write_plugin, core_version: str
) -> None:
    write_kira_plugin(write_plugin, core_version=core_version)

    await manager.load_all()

    status = manager.status("reminder_like")
    assert status.state == "error"
    assert f"needs hookchat {core_version}" in status.reason
    assert core.__version__ in status.reason and KIRA_API_VERSION in status.reason


async def test_the_loader_conventions_of_kiraai_plugins(manager: PluginLoader, plugins_root, caplog) -> None:
    """No `plugin_id` (the folder names it), a numeric version, the plugin class in a helper module, the config
    read as `plugin_cfg`, a coloured `get_logger` and `ctx.get_plugin_data_dir()`: all as KiraAI plugins use them."""
    import json

    folder = plugins_root / "KiraAI-Notes-Plugin"
    folder.mkdir()
    (folder / "manifest.json").write_text(json.dumps({"display_name": "Notes", "version": 2, "core_version": ">=2.6"}))
    (folder / "schema.json").write_text(json.dumps({"greeting": {"type": "text", "default": "hi"}}))
    (folder / "plugin_impl.py").write_text(
        "from core.plugin import BasePlugin, get_logger\n"
        "log = get_logger('notes', 'cyan')\n"
        "class NotesPlugin(BasePlugin):\n"
        "    async def initialize(self):\n"
        "        self.greeting = self.plugin_cfg['greeting']\n"
        "        self.data = self.ctx.get_plugin_data_dir()\n"
        "class OtherPlugin(BasePlugin):\n"
        "    pass\n",
        encoding="utf-8",
    )
    (folder / "main.py").write_text("from .plugin_impl import NotesPlugin, OtherPlugin\n", encoding="utf-8")

    with caplog.at_level(logging.WARNING, logger="hookchat"):
        await manager.load_all()
    status = manager.status("KiraAI-Notes-Plugin")
    assert status.state == "loaded", status.reason
    assert status.version == "2"
    plugin = manager.get_plugin("KiraAI-Notes-Plugin")
    assert type(plugin).__name__ == "NotesPlugin", "the first plugin class by name, as KiraAI picks it"
    assert plugin.greeting == "hi"
    assert plugin.data.is_dir() and plugin.data.name == "KiraAI-Notes-Plugin"
    assert any("several plugin classes" in r.getMessage() for r in caplog.records)
