"""Hot reload: a changed plugin is reloaded alone and the next turn runs its new code, a turn in flight finishes on
the old code, and a plugin that failed to load is retried when its files change."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from core.provider import LLMRequest, LLMResponse
from core.reload import PluginReloader
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

PLUGIN = """
from core.plugin import BasePlugin, on


class Tagger(BasePlugin):
    @on.after_xml_parse()
    async def mark(self, event, chain, *_):
        chain.text(" [{version}]")
"""


def write_plugin(root: Path, version: str) -> Path:
    folder = root / "tagger"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps({"plugin_id": "tagger"}), encoding="utf-8")
    (folder / "main.py").write_text(PLUGIN.format(version=version), encoding="utf-8")
    return folder / "main.py"


class GatedModel(ScriptedProvider):
    """Answers "ok"; the first call waits until the test opens the gate."""

    def __init__(self) -> None:
        super().__init__()
        self.entered, self.gate = asyncio.Event(), asyncio.Event()

    async def complete(self, req: LLMRequest) -> LLMResponse:
        if not self.entered.is_set():
            self.entered.set()
            await self.gate.wait()
        return LLMResponse(text_response="<msg>ok</msg>")


async def test_an_edited_plugin_reloads_alone_after_the_turn_in_flight_finishes_on_the_old_code(tmp_path):
    main = write_plugin(tmp_path, "v1")
    model = GatedModel()
    async with ChatHarness(provider=model, config={"plugins": {"dirs": [str(tmp_path)]}}) as bot:
        chat_before = bot.plugin("chat")
        reloader = PluginReloader(bot.app)
        in_flight = asyncio.create_task(bot.send("first"))
        await model.entered.wait()
        write_plugin(tmp_path, "v2")
        reloading = asyncio.create_task(reloader.apply([main]))
        await asyncio.sleep(0.1)
        assert not reloading.done(), "the reload waits for the turn in flight"
        model.gate.set()
        assert [c.plain_text for c in await in_flight] == ["ok [v1]"], "the old turn finishes on the old code"
        [event] = await reloading
        assert (event.plugin_id, event.ok, event.state) == ("tagger", True, "loaded")
        assert [c.plain_text for c in await bot.send("second")] == ["ok [v2]"], "the next turn runs the new code"
        assert bot.plugin("chat") is chat_before, "only the changed plugin was reloaded"


async def test_a_save_that_does_not_load_keeps_the_old_version_serving_said_once_and_retried(tmp_path, caplog):
    main = write_plugin(tmp_path, "v1")
    model = ScriptedProvider(["<msg>a</msg>", "<msg>b</msg>"])
    async with ChatHarness(provider=model, config={"plugins": {"dirs": [str(tmp_path)]}}) as bot:
        reloader = PluginReloader(bot.app, debounce_ms=50)
        await reloader.start()
        try:
            main.write_text("this is not python(\n", encoding="utf-8")
            failed = await _next_event(reloader, 0)
            assert (failed.plugin_id, failed.ok, failed.state) == ("tagger", False, "loaded")
            assert "SyntaxError" in failed.reason and "previous version keeps running" in failed.reason
            status = bot.app.plugins.status("tagger")
            assert status.state == "loaded" and status.previous_version and status.reason == failed.reason
            assert [c.plain_text for c in await bot.send("hi")] == ["a [v1]"], "the old version's hooks still run"
            said = [r for r in caplog.records if "SyntaxError" in r.getMessage()]
            assert len(said) == 1 and "previous version keeps running" in said[0].getMessage()

            write_plugin(tmp_path, "v3")
            fixed = await _next_event(reloader, 1)
            assert (fixed.plugin_id, fixed.ok) == ("tagger", True), "a failed reload is retried when files change"
            assert not bot.app.plugins.status("tagger").previous_version
            assert [c.plain_text for c in await bot.send("hi")] == ["b [v3]"]
        finally:
            await reloader.stop()


async def _next_event(reloader: PluginReloader, index: int):
    """The reloader's `index`-th outcome, waiting for the watcher (bounded, so a broken watcher fails the test)."""
    for _ in range(200):
        if len(reloader.events) > index:
            return reloader.events[index]
        await asyncio.sleep(0.05)
    raise AssertionError(f"no reload happened (events: {list(reloader.events)})")
