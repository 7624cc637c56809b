"""Loading plugin folders: manifest, entry module, relative imports, `schema.json` config, and plugins that fail to
load, which are reported with their reason and skipped while the others load."""

from __future__ import annotations

from typing import Any

import pytest

import core
from core.plugin import PluginContext, PluginLoader, signals

pytestmark = pytest.mark.anyio


def answering(name: str, answer: str = "", *, extra: str = "") -> str:
    """The code of a plugin whose hook answers the custom event "ping" with `answer` (default: its name)."""
    return f"""
        from core.plugin import BasePlugin, on
        {extra}

        class {name.title().replace("_", "")}(BasePlugin):
            @on.custom_event(event_name="ping")
            async def pong(self, event):
                event.data.append({answer or repr(name)})
    """


async def ping(manager: PluginLoader) -> list[Any]:
    """What the loaded plugins answer to the custom event "ping", in hook order."""
    event = await PluginContext("tests", manager=manager).dispatch_custom("ping", [])
    return event.data


async def test_plugins_load_from_folders_with_a_manifest(manager: PluginLoader, write_plugin) -> None:
    write_plugin("echo", answering("echo"), manifest={"display_name": "Echo", "version": "2.1.0", "author": "ann"})
    write_plugin("greeter", answering("greeter"))

    statuses = await manager.load_all()

    assert [(s.plugin_id, s.state, s.version) for s in statuses] == [
        ("echo", "loaded", "2.1.0"),
        ("greeter", "loaded", "1.0.0"),
    ]
    assert await ping(manager) == ["echo", "greeter"]
    echo = manager.get_plugin("echo")
    assert echo.plugin_id == "echo"
    assert echo.ctx.metadata["display_name"] == "Echo" and echo.ctx.metadata["author"] == "ann"
    assert echo.ctx.plugin_dir.name == "echo"


async def test_equal_priorities_follow_the_plugin_id_not_the_folder_name(manager: PluginLoader, write_plugin) -> None:
    write_plugin("a_folder", answering("zeta"), manifest={"plugin_id": "zeta"})
    write_plugin("b_folder", answering("alpha"), manifest={"plugin_id": "alpha"})

    await manager.load_all()

    assert manager.loaded_ids() == ["alpha", "zeta"]
    assert await ping(manager) == ["alpha", "zeta"]


@pytest.mark.parametrize("entry", ["main.py", "plugin.py", "__init__.py"])
async def test_the_entry_module_is_main_py_else_plugin_py_else_init_py(
    manager: PluginLoader, write_plugin, entry: str
) -> None:
    write_plugin("echo", answering("echo", repr(entry)), entry=entry)

    await manager.load_all()

    assert await ping(manager) == [entry]


async def test_main_py_wins_over_plugin_py(manager: PluginLoader, write_plugin) -> None:
    write_plugin("echo", answering("echo", "'main'"), files={"plugin.py": "raise RuntimeError('not imported')"})

    await manager.load_all()

    assert await ping(manager) == ["main"]


async def test_relative_imports_inside_the_plugin_folder_work(manager: PluginLoader, write_plugin) -> None:
    write_plugin(
        "echo",
        answering("echo", "shout('hello')", extra="from .helpers import shout"),
        files={"helpers.py": "def shout(text):\n    return text.upper() + '!'\n"},
    )

    await manager.load_all()

    assert await ping(manager) == ["HELLO!"]


GREETER_SCHEMA = {
    "greeting": {"type": "string", "default": "hello", "description": "what to say"},
    "times": {"type": "integer", "default": 1, "description": "how often"},
}
GREETER = answering("greeter", "self.cfg['greeting'] * self.cfg['times']")


async def test_schema_defaults_and_the_operators_values_reach_the_plugin_as_cfg(make_manager, write_plugin) -> None:
    write_plugin("greeter", GREETER, schema=GREETER_SCHEMA)
    manager = make_manager(plugin_config={"greeter": {"times": 2}})

    await manager.load_all()

    assert await ping(manager) == ["hellohello"]
    greeter = manager.get_plugin("greeter")
    assert greeter.cfg == greeter.ctx.config == {"greeting": "hello", "times": 2}


@pytest.mark.parametrize(
    ("values", "field"),
    [({"times": "three"}, "'times'"), ({"greting": "hi"}, "'greting'")],
    ids=["wrong type", "unknown field"],
)
async def test_a_bad_config_value_is_an_error_naming_the_plugin_and_the_field(
    make_manager, write_plugin, values: dict[str, Any], field: str
) -> None:
    write_plugin("greeter", GREETER, schema=GREETER_SCHEMA)
    write_plugin("echo", answering("echo"))
    manager = make_manager(plugin_config={"greeter": values})

    await manager.load_all()

    status = manager.status("greeter")
    assert status.state == "error"
    assert "'greeter'" in status.reason and field in status.reason
    assert await ping(manager) == ["echo"]


async def test_broken_plugins_are_skipped_with_their_reason_and_the_others_load(
    manager: PluginLoader, write_plugin, record_signal
) -> None:
    failed = record_signal(signals.plugin_failed)
    loaded = record_signal(signals.plugin_loaded)
    write_plugin("a_missing_dependency", answering("x", extra="import hookchat_no_such_module"))
    write_plugin("b_too_new", answering("x"), manifest={"core_version": ">=99.0"})
    write_plugin(
        "c_refuses",
        answering("x") + "\n            async def initialize(self):\n"
        "                raise RuntimeError('no API key configured')\n",
    )
    write_plugin(
        "d_sync_hook",
        """
        from core.plugin import BasePlugin, on

        class SyncHook(BasePlugin):
            @on.im_message()
            def on_message(self, event):
                pass
    """,
    )
    write_plugin("e_bad_manifest", answering("x"), manifest={"plugin_id": "../outside"})
    write_plugin("echo", answering("echo"))

    await manager.load_all()

    reasons = {s.plugin_id: s.reason for s in manager.statuses() if s.state == "error"}
    assert "No module named 'hookchat_no_such_module'" in reasons["a_missing_dependency"]
    assert ">=99.0" in reasons["b_too_new"] and core.__version__ in reasons["b_too_new"]
    assert "no API key configured" in reasons["c_refuses"]
    assert "SyncHook.on_message" in reasons["d_sync_hook"] and "not async" in reasons["d_sync_hook"]
    assert "plugin_id" in reasons["e_bad_manifest"]
    assert {f["plugin_id"]: f["reason"] for f in failed} == reasons

    assert manager.loaded_ids() == ["echo"]
    assert [c["plugin_id"] for c in loaded] == ["echo"]
    assert await ping(manager) == ["echo"]
    assert {e["plugin_id"] for chain in manager.hook_chains().values() for e in chain} == {"echo"}


async def test_a_broken_plugin_fixed_on_disk_loads_on_reload(manager: PluginLoader, write_plugin) -> None:
    write_plugin("echo", answering("echo", extra="raise ImportError('half-written')"))
    await manager.load_all()
    assert manager.status("echo").state == "error"

    write_plugin("echo", answering("echo"))
    status = await manager.reload("echo")

    assert status.state == "loaded" and status.hooks == ["custom_event:ping:pong"]
    assert await ping(manager) == ["echo"]
