"""Seed 002: its code runs unmodified. Whole blocks are executed as written; snippets written against `self` are
placed, verbatim, into methods of a generated plugin that a real bot loads."""

import json
import logging

import pytest

from core.plugin import BasePlugin
from core.testing import ChatHarness, ScriptedProvider
from plugin.sdk.plugin import NekoPluginBase, Ok, plugin_entry
from tests.sdk.seed_snippets import SEED_002, block, method, snippet, write_plugin

pytestmark = pytest.mark.anyio


def test_the_import_block_runs():
    namespace: dict = {}
    exec(snippet("from plugin.sdk.plugin import (", ")"), namespace)
    assert issubclass(namespace["NekoPluginBase"], BasePlugin)


async def test_the_minimal_plugin_class_loads():
    namespace: dict = {}
    exec(snippet("from plugin.sdk.plugin import (", ")"), namespace)
    exec(block(SEED_002, "class MyPlugin(NekoPluginBase)"), namespace)
    async with ChatHarness(plugins=[namespace["MyPlugin"]], builtins=()) as bot:
        assert bot.app.plugins.status("my_plugin").state == "loaded"
        plugin = bot.plugin("my_plugin")
        assert plugin.ctx.plugin_id == plugin.plugin_id == "my_plugin"


class OtherPlugin(NekoPluginBase):
    @plugin_entry(id="do_work")
    async def do_work(self, key: str):
        return {"worked_on": key}

    @plugin_entry(id="get_data")
    async def get_data(self):
        return {"data": [1, 2]}


class Other(NekoPluginBase):
    @plugin_entry(id="do_stuff")
    async def do_stuff(self):
        return "stuff done"


class DependencyPlugin(NekoPluginBase):
    pass


SCHEMA = {"my_settings": {"type": "object", "default": {"timeout": 45}, "properties": {"timeout": {"type": "integer"}}}}

MEMBERS = [
    method("everyday", 'request_id = "req-1"', snippet("self.logger.info(", "timeout = await self.config.get_int(")),
    method(
        "storage",
        snippet("unwrap(await self.store.set(", "    await session.commit()"),
        "rows = []",
        "async with unwrap(await self.db.session()) as s:\n"
        '    rows = (await s.execute("SELECT name FROM sqlite_master")).fetchall()',
    ),
    method("translate", snippet('message = self.i18n.t("greeting"', 'message = self.i18n.t("greeting"')),
    method("status", snippet("self.report_status({", "})")),
    method("push", snippet("result = self.push_message(", '    self.logger.warning("message submission failed')),
    method(
        "paths",
        snippet('db_path = self.data_path("records.db")', 'db_path = self.data_path("records.db")'),
        snippet('preview_path = self.cache_path("preview.png")', 'preview_path = self.cache_path("preview.png")'),
    ),
    method(
        "dynamic",
        snippet("self.register_dynamic_entry(", ")"),
        "async def handler(**_):\n    return await self.finish(data={'summary': 's', 'raw': 1})",
        snippet("self.register_dynamic_entry(", ")", occurrence=1),
    ),
    method(
        "finish_reply",
        snippet(
            'return await self.finish(data={"summary": "Done"}, reply=True)',
            'return await self.finish(data={"summary": "Done"}, reply=True)',
        ),
        returns="None",
    ),
    snippet('@plugin_entry(llm_result_fields=["summary"])', "    return await self.finish("),
    method(
        "results",
        "from plugin.sdk.plugin import SdkError",
        snippet('result = await self.plugins.call_entry("other:do_stuff")', '    self.logger.error(f"Call failed'),
        "first = result",
        snippet(
            'result = await self.plugins.call_entry("other:do_stuff")',
            'result = await self.plugins.call_entry("other:do_stuff")',
        ).replace("other:do_stuff", "nope:x"),
        snippet("if isinstance(result, Ok):", '    self.logger.error(f"Call failed'),
        snippet("value = unwrap(result)", "value = unwrap(result)").replace("result", "first"),
        snippet("value = unwrap_or(result, None)", "value = unwrap_or(result, None)"),
        "failed = Err(SdkError('something went wrong'))",
    ),
    method(
        "cross_plugin",
        *(
            snippet(line, line)
            for line in ["result = await self.plugins.list()", "result = await self.plugins.list(enabled=True)"]
        ),
        "listed = result",
        snippet("result = await self.plugins.list_ids()", "result = await self.plugins.list_ids()"),
        "ids = result",
        snippet('result = await self.plugins.exists("other_plugin")', "result = await self.plugins.exists("),
        "exists = result",
        snippet('result = await self.plugins.call_entry("other_plugin:do_work"', "result = await self.plugins.call"),
        "work = result",
        snippet("result = await self.plugins.call_entry_json(", "result = await self.plugins.call_entry_json("),
        "data = result",
        snippet("result = await self.plugins.require_enabled(", "result = await self.plugins.require_enabled("),
    ),
    method(
        "store_example",
        snippet(
            'unwrap_or(await self.store.set("key", {"count": 42}), None)',
            'value = unwrap_or(await self.store.get("key"), None)',
        ),
    ),
    method(
        "system",
        snippet(
            "config = unwrap_or(await self.system_info.get_system_config(), {})",
            "python_env = unwrap_or(await self.system_info.get_python_env(), {})",
        ),
    ),
    method(
        "read_bus",
        snippet("events = await self.bus.events.get(", "records = await self.bus.memory.get("),
        snippet("frames = await self.bus.frames.get(", "latest = frames.sort("),
    ),
]


@pytest.fixture
async def seed_bot(tmp_path):
    folder = write_plugin(
        tmp_path / "plugins",
        "seed_features",
        "SeedFeatures",
        MEMBERS,
        files={"schema.json": json.dumps(SCHEMA), "i18n/en.json": json.dumps({"greeting": "Hello, {name}!"})},
    )
    provider = ScriptedProvider(["Hi there."])
    config = {"data": {"dir": str(tmp_path / "data")}, "server": {"token": "seed-secret"}}
    async with ChatHarness(
        plugins=[folder, OtherPlugin, Other, DependencyPlugin], provider=provider, config=config
    ) as bot:
        yield bot, bot.plugin("seed_features")


async def test_logging_and_config(seed_bot, caplog):
    bot, plugin = seed_bot
    with caplog.at_level(logging.INFO, logger="hookchat.plugin.seed_features"):
        found = await plugin.everyday()
    assert found["timeout"] == 45
    assert "Processing request: req-1" in [r.getMessage() for r in caplog.records]


async def test_store_and_database(seed_bot):
    bot, plugin = seed_bot
    found = await plugin.storage()
    assert found["rows"] == [("notes",)]
    assert (await plugin.store.get("last_query")) == Ok("weather")
    stored = await plugin.store_example()
    assert stored["value"] == {"count": 42}


async def test_i18n_status_paths(seed_bot, tmp_path):
    bot, plugin = seed_bot
    assert (await plugin.translate())["message"] == "Hello, Alice!"
    await plugin.status()
    assert plugin.last_status["progress"] == 50
    paths = await plugin.paths()
    root = tmp_path / "data" / "plugin_data" / "seed_features"
    assert paths["db_path"] == root / "data" / "records.db" and paths["preview_path"] == root / "cache" / "preview.png"
    assert plugin.plugin_dir == plugin.config_dir == tmp_path / "plugins" / "seed_features"
    assert plugin.storage_dir == root and plugin.runtime_config_path == root / "runtime_config.json"
    assert plugin.metadata["version"] == "1.2.3"


async def test_push_message_receipt(seed_bot, caplog):
    bot, plugin = seed_bot
    with caplog.at_level(logging.WARNING, logger="hookchat.plugin.seed_features"):
        before = (await plugin.push())["result"]
    assert before == {"submitted": False, "ok": False, "reason": "transport_unavailable"}, "no conversation yet"
    assert "message submission failed: transport_unavailable" in caplog.text
    await bot.send("hi")
    after = (await plugin.push())["result"]
    assert after["submitted"] is True
    await bot.app.push.join()
    assert bot.sent[-1].plain_text == "Task complete"


async def test_dynamic_entries_and_finish(seed_bot):
    bot, plugin = seed_bot
    await plugin.dynamic()
    ids = [e["id"] for e in plugin.list_entries()]
    assert {"dynamic_greet", "my-tool", "search"} <= set(ids)
    caller = bot.plugin("dependency_plugin")
    assert await caller.plugins.call_entry("seed_features:dynamic_greet", {"name": "Ann"}) == Ok({"msg": "Hi Ann"})
    assert await caller.plugins.call_entry("seed_features:my-tool") == Ok({"summary": "s", "raw": 1})
    searched = await caller.plugins.call_entry("seed_features:search", {"query": "q"})
    assert searched.value["summary"] == "3 results"
    assert [e["llm_result_fields"] for e in plugin.list_entries() if e["id"] == "search"] == [["summary"]]
    assert await plugin.finish_reply() == {"summary": "Done"}


async def test_results_and_cross_plugin_calls(seed_bot):
    bot, plugin = seed_bot
    found = await plugin.results()
    assert found["first"] == Ok("stuff done") and found["value"] is None and found["error"].code
    crossed = await plugin.cross_plugin()
    listed = [p["plugin_id"] for p in crossed["listed"].value]
    assert {"dependency_plugin", "other", "other_plugin", "seed_features"} <= set(listed)
    assert all(p["enabled"] for p in crossed["listed"].value) and listed == crossed["ids"].value
    assert crossed["exists"] == Ok(True)
    assert crossed["work"] == Ok({"worked_on": "value"})
    assert crossed["data"] == Ok({"data": [1, 2]})
    assert crossed["result"].value["enabled"] is True


async def test_system_info_and_bus(seed_bot):
    bot, plugin = seed_bot
    found = await plugin.system()
    assert found["config"]["hookchat_version"] and found["python_env"]["python_version"]
    settings = found["settings"]
    assert settings["token_configured"] is True and settings["tool_registry_running"] is False
    assert "seed-secret" not in repr(found), "whether a token is set, never the token"
    bus = await plugin.read_bus()
    assert bus["recent"] == [] and bus["latest"] == []
