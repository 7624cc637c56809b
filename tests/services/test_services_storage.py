"""Per-plugin storage and configuration: the key-value store, the SQLite database, data and cache paths, validated
config updates, and the brace-style logger."""

import json
import logging
from pathlib import Path

import pytest

from core.plugin import BasePlugin
from core.services import (
    ConfigValidationError,
    Err,
    Ok,
    PluginStore,
    SdkError,
    get_plugin_logger,
    unwrap,
    unwrap_or,
)
from core.testing import ChatHarness

pytestmark = pytest.mark.anyio


class Keeper(BasePlugin):
    pass


async def test_the_store_keeps_json_values_and_reports_errors_as_err(tmp_path):
    async with ChatHarness(plugins=[Keeper], builtins=(), config={"data": {"dir": str(tmp_path)}}) as bot:
        store = bot.plugin("keeper").store
        assert unwrap(await store.set("count", {"n": 42})) is None
        assert await store.get("count") == Ok({"n": 42})
        assert await store.get("missing") == Ok(None)
        assert unwrap_or(await store.get(""), "invalid key") == "invalid key"
        assert await store.get("missing", 7) == Ok(7)
        assert unwrap(await store.exists("count")) is True
        await store.set("other", [1, 2])
        assert unwrap(await store.keys()) == ["count", "other"]
        assert unwrap(await store.delete("other")) is True
        bad = await store.set("x", object())
        assert isinstance(bad, Err) and "not JSON-serialisable" in str(bad.error)
        assert isinstance(await store.get(""), Err)
        path = store.path
    assert path == tmp_path / "plugin_data" / "keeper" / "store.sqlite3"
    again = PluginStore(path, plugin_id="keeper")
    assert await again.get("count") == Ok({"n": 42}), "values survive the plugin and the process"
    await again.close()
    assert isinstance(await again.get("count"), Err), "a closed store answers Err, it does not raise"


async def test_database_sessions_commit_roll_back_and_run_one_at_a_time(tmp_path):
    async with ChatHarness(plugins=[Keeper], builtins=(), config={"data": {"dir": str(tmp_path)}}) as bot:
        db = bot.plugin("keeper").db
        async with unwrap(await db.session()) as session:
            await session.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, title TEXT)")
            rows = await session.execute("INSERT INTO notes (title) VALUES (?)", ("first",))
            assert rows.lastrowid == 1
            await session.commit()
        async with unwrap(await db.session()) as session:
            await session.execute("INSERT INTO notes (title) VALUES (:t)", {"t": "not committed"})
        async with unwrap(await db.session()) as session:
            rows = await session.execute("SELECT id, title FROM notes")
            assert rows.fetchall() == [(1, "first")] and rows.mappings() == [{"id": 1, "title": "first"}]
            assert (await session.execute("SELECT count(*) FROM notes")).scalar() == 1
            with pytest.raises(SdkError, match="no such table"):
                await session.execute("SELECT * FROM missing_table")
        session = unwrap(await db.session())
        with pytest.raises(SdkError, match="async with"):
            await session.execute("SELECT 1")
    assert (tmp_path / "plugin_data" / "keeper" / "database.sqlite3").is_file()


async def test_data_and_cache_paths_stay_inside_the_plugins_directories(tmp_path):
    async with ChatHarness(plugins=[Keeper], builtins=(), config={"data": {"dir": str(tmp_path)}}) as bot:
        plugin = bot.plugin("keeper")
        root = tmp_path / "plugin_data" / "keeper"
        assert plugin.data_path("records.db") == root / "data" / "records.db"
        assert plugin.cache_path("preview.png") == root / "cache" / "preview.png"
        assert (root / "data").is_dir() and (root / "cache").is_dir()
        with pytest.raises(SdkError, match="leaves the plugin's data directory"):
            plugin.data_path("..", "..", "history.sqlite3")


async def test_each_directory_is_made_once_not_on_every_call(tmp_path, monkeypatch):
    made = []
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        made.append(self.name)
        return real_mkdir(self, *args, **kwargs)

    async with ChatHarness(plugins=[Keeper], builtins=(), config={"data": {"dir": str(tmp_path)}}) as bot:
        plugin = bot.plugin("keeper")
        monkeypatch.setattr(Path, "mkdir", mkdir)
        plugin.data_path("first")
        plugin.cache_path("first")
        first_calls = list(made)
        for name in ("a", "b", "c"):
            plugin.data_path(name)
            plugin.cache_path(name)
        monkeypatch.undo()
    assert {"data", "cache"} <= set(first_calls)
    assert made == first_calls, "later calls make no directory"


SCHEMA = {
    "my_settings": {
        "type": "object",
        "default": {"timeout": 30, "name": "x"},
        "properties": {"timeout": {"type": "integer", "minimum": 1}, "name": {"type": "string"}},
    },
    "enabled": {"type": "boolean", "default": True},
}


@pytest.fixture
def configured_plugin(write_plugin):
    return write_plugin(
        "tunable",
        """
        from core.plugin import BasePlugin

        class Tunable(BasePlugin):
            pass
    """,
        schema=SCHEMA,
    )


@pytest.fixture
def write_plugin(tmp_path):
    root = tmp_path / "plugins"

    def write(folder, code, schema):
        import textwrap

        path = root / folder
        path.mkdir(parents=True)
        (path / "manifest.json").write_text(json.dumps({"plugin_id": folder}))
        (path / "schema.json").write_text(json.dumps(schema))
        (path / "main.py").write_text(textwrap.dedent(code))
        return path

    return write


async def test_config_reads_and_validated_updates(tmp_path, configured_plugin):
    config = {"data": {"dir": str(tmp_path / "data")}}
    async with ChatHarness(plugins=[configured_plugin], builtins=(), config=config) as bot:
        plugin = bot.plugin("tunable")
        assert await plugin.config.get_int("my_settings.timeout", default=5) == 30
        assert await plugin.config.get_int("my_settings.missing", default=5) == 5
        assert await plugin.config.get("enabled") is True
        with pytest.raises(SdkError, match="not an integer"):
            await plugin.config.get_int("my_settings.name")
        new = await plugin.config.update({"my_settings": {"timeout": 60}})
        assert new["my_settings"] == {"timeout": 60, "name": "x"}
        assert plugin.cfg["my_settings"]["timeout"] == 60, "applied in place: cfg sees it"
        with pytest.raises(ConfigValidationError, match="my_settings"):
            await plugin.config.update({"my_settings": {"timeout": 0}})
        with pytest.raises(ConfigValidationError, match="unknown config field"):
            await plugin.ctx.update_own_config({"typo": 1})
        assert await plugin.config.get_int("my_settings.timeout") == 60, "a refused update changes nothing"
        await plugin.ctx.update_own_config({"enabled": False})
        saved = json.loads((tmp_path / "data" / "plugin_data" / "tunable" / "runtime_config.json").read_text())
    assert saved == {"my_settings": {"timeout": 60}, "enabled": False}


def test_the_plugin_logger_takes_brace_and_percent_placeholders(caplog):
    logger = get_plugin_logger("logs")
    with caplog.at_level(logging.INFO, logger="hookchat.plugin.logs"):
        logger.info("Processing request: {}", "r-1")
        logger.warning("message submission failed: %s", "backpressure")
        logger.info("literal {braces} stay")
        logger.error(f"Call failed: {SdkError('x')}")
    assert [r.getMessage() for r in caplog.records] == [
        "Processing request: r-1",
        "message submission failed: backpressure",
        "literal {braces} stay",
        "Call failed: x",
    ]
    assert all(r.plugin_id == "logs" for r in caplog.records)
    assert caplog.records[0].filename == "test_services_storage.py", "records point at the caller's line"


async def test_an_absolute_path_cannot_escape_either(tmp_path):
    async with ChatHarness(plugins=[Keeper], builtins=(), config={"data": {"dir": str(tmp_path)}}) as bot:
        with pytest.raises(SdkError, match="leaves the plugin's cache directory"):
            bot.plugin("keeper").cache_path("/etc/passwd")
        assert bot.plugin("keeper").data_path("a", "..", "b") == tmp_path / "plugin_data" / "keeper" / "data" / "b"
