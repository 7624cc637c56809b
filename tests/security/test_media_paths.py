"""hookchat's own files are never sendable: a model reply naming the history database, a plugin's store or the
config file sends a short notice instead, whatever `[media] allowed_dirs` says; what a tool attached this turn
still goes out."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.chat.message_elements import File, Text
from core.config import load_config
from core.plugin import BasePlugin, register
from core.provider import ToolCall, ToolResult
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


def _sent(chains) -> list:
    return [element for chain in chains for element in chain]


async def _reply_to(output: str, config: dict, plugins=()) -> list:
    provider = ScriptedProvider([output])
    async with ChatHarness(plugins, provider, config) as bot:
        await bot.send("hello")  # a first turn, so the history database has something in it
        provider.add(output)
        return _sent(await bot.send("send me the file"))


async def test_the_history_database_is_not_sendable_by_default(tmp_path: Path) -> None:
    sent = await _reply_to("<msg><file>history.sqlite3</file></msg>", {"data": {"dir": str(tmp_path / "data")}})

    assert not any(isinstance(e, File) for e in sent)
    assert [e.text for e in sent if isinstance(e, Text)][-1] == "[could not send history.sqlite3]"


async def test_a_media_dir_that_contains_the_data_dir_still_hides_it(tmp_path: Path, caplog) -> None:
    (tmp_path / "photo.txt").write_text("a public file")
    config = {"data": {"dir": str(tmp_path / "data")}, "media": {"allowed_dirs": [str(tmp_path)]}}
    store = tmp_path / "data" / "plugin_data" / "notes" / "store.json"
    store.parent.mkdir(parents=True)
    store.write_text('{"secret": 1}')

    sent = await _reply_to(
        "<msg><file>photo.txt</file><file>data/history.sqlite3</file>"
        "<file>data/plugin_data/notes/store.json</file></msg>",
        config,
    )

    files = [e for e in sent if isinstance(e, File)]
    assert [Path(f.path).name for f in files] == ["photo.txt"]
    assert "[could not send history.sqlite3]" in [e.text for e in sent if isinstance(e, Text)]
    assert any("private data" in r.getMessage() for r in caplog.records)


async def test_the_data_dir_as_a_media_dir_is_refused_with_a_warning(tmp_path: Path, caplog) -> None:
    data = tmp_path / "data"
    config = {"data": {"dir": str(data)}, "media": {"allowed_dirs": [str(data)]}}

    sent = await _reply_to("<msg><file>history.sqlite3</file></msg>", config)

    assert not any(isinstance(e, File) for e in sent)
    assert any("media directory" in r.getMessage() and "refused" in r.getMessage() for r in caplog.records)


async def test_the_config_file_is_not_sendable(tmp_path: Path) -> None:
    (tmp_path / "hookchat.toml").write_text('[media]\nallowed_dirs = ["."]\n[data]\ndir = "data"\n')
    config = load_config(tmp_path / "hookchat.toml", env={})
    (tmp_path / "readme.txt").write_text("public")

    sent = await _reply_to("<msg><file>hookchat.toml</file><file>readme.txt</file></msg>", config)

    assert [Path(e.path).name for e in sent if isinstance(e, File)] == ["readme.txt"]


async def test_a_tool_attachment_in_the_data_dir_stays_sendable(tmp_path: Path) -> None:
    class Report(BasePlugin):
        @register.tool("report", "Writes a report", {"type": "object", "properties": {}})
        async def report(self, event, *_):
            path = self.ctx.get_plugin_data_dir() / "report.txt"
            path.write_text("numbers")
            return ToolResult(text="report ready", attachments=[File(path=str(path), name="report.txt")])

    provider = ScriptedProvider([[ToolCall("report", {})], "<msg><file>report.txt</file></msg>"])
    async with ChatHarness([Report], provider, {"data": {"dir": str(tmp_path / "data")}}) as bot:
        sent = _sent(await bot.send("report please"))

    assert [e.name for e in sent if isinstance(e, File)] == ["report.txt"]
