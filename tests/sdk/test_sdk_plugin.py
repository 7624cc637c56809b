"""`NekoPluginBase` as a hookchat plugin: lifecycle steps, saved config updates across a reload, routers, and the
parts of the original host that say they are not available."""

import json

import pytest

from core.testing import ChatHarness
from plugin.sdk.plugin import (
    Err,
    NekoPluginBase,
    Ok,
    PluginRouter,
    PluginSettings,
    SdkError,
    SettingsField,
    get_os_activity_snapshot,
    lifecycle,
    neko_plugin,
    plugin,
    plugin_entry,
    ui,
    unwrap,
)

pytestmark = pytest.mark.anyio

LOG: list = []


@neko_plugin
class Lifecycle(NekoPluginBase):
    @lifecycle(id="startup")
    async def startup(self, **_):
        LOG.append("startup")
        return Ok({"status": "ready"})

    @lifecycle(id="shutdown")
    async def shutdown(self, **_):
        LOG.append("shutdown")

    @lifecycle(id="config_change")
    async def changed(self, config=None, **_):
        LOG.append(("config_change", config))


async def test_startup_runs_at_initialize_and_shutdown_at_terminate():
    LOG.clear()
    async with ChatHarness(plugins=[Lifecycle], builtins=()) as bot:
        assert LOG == ["startup"]
        await bot.plugin("lifecycle").config.update({"x": 1})
        assert LOG[-1] == ("config_change", {"x": 1})
        await bot.app.plugins.disable("lifecycle")
        assert LOG[-1] == "shutdown"


async def test_a_startup_err_refuses_the_load_with_its_reason():
    @neko_plugin
    class Refuses(NekoPluginBase):
        @lifecycle(id="startup")
        async def startup(self, **_):
            return Err(SdkError("the API key is missing"))

    async with ChatHarness(plugins=[Refuses], builtins=(), allow_failed=True) as bot:
        status = bot.app.plugins.status("refuses")
    assert status.state == "error" and "the API key is missing" in status.reason


async def test_saved_config_updates_come_back_when_the_plugin_loads_again(tmp_path):
    folder = tmp_path / "plugins" / "tunable"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(json.dumps({"plugin_id": "tunable"}))
    (folder / "schema.json").write_text(json.dumps({"level": {"type": "integer", "default": 1}}))
    (folder / "main.py").write_text(
        "from plugin.sdk.plugin import NekoPluginBase\n\nclass Tunable(NekoPluginBase):\n    pass\n"
    )
    async with ChatHarness(plugins=[folder], builtins=(), config={"data": {"dir": str(tmp_path / "d")}}) as bot:
        await bot.plugin("tunable").ctx.update_own_config({"level": 5})
        await bot.app.plugins.reload("tunable")
        assert bot.plugin("tunable").cfg["level"] == 5
        assert await bot.plugin("tunable").config.get_int("level") == 5


class Greetings(PluginRouter):
    @plugin_entry(id="hello")
    async def hello(self, name: str = "you"):
        return f"hello {name} from {self.plugin.plugin_id}"


class Host(NekoPluginBase):
    pass


async def test_a_router_mounts_its_entries_with_a_prefix():
    async with ChatHarness(plugins=[Host], builtins=()) as bot:
        host = bot.plugin("host")
        router = Greetings(prefix="greet_")
        host.include_router(router)
        assert host.list_routers() == ["Greetings"] and host.get_router("Greetings") is router
        assert unwrap(await host.plugins.call_entry("host:greet_hello", {"name": "Ann"})) == "hello Ann from host"
        assert host.exclude_router("Greetings") is True
        assert (await host.plugins.call_entry("host:greet_hello")).error.code == "entry_not_found"


async def test_host_only_parts_say_they_are_not_available():
    with pytest.raises(SdkError, match="no hosted UI"):
        ui.panel  # noqa: B018 - reading it is what raises
    assert isinstance(get_os_activity_snapshot(), Err)
    async with ChatHarness(plugins=[Host], builtins=()) as bot:
        host = bot.plugin("host")
        assert host.register_static_ui("static") is False
        with pytest.raises(SdkError, match="export_push"):
            await host.export_push(data=1)
        events = await host.bus.events.get(plugin_id="host")
        assert events.filter(priority_min=1).sort(by="timestamp", reverse=True).limit(20) == []
        with pytest.raises(SdkError, match="watch"):
            host.bus.messages.watch()


def test_settings_models_and_the_decorator_namespace():
    class Settings(PluginSettings):
        timeout: int = SettingsField(default=30, ge=1)

    assert Settings.from_config({"timeout": 5, "other": "ignored"}).timeout == 5
    assert plugin.entry is plugin_entry and plugin.lifecycle is lifecycle
    with pytest.raises(TypeError, match="NekoPluginBase subclass"):
        neko_plugin(PluginRouter)
