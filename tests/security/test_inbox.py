"""The durable inbox: a received message is recorded before its turn and leaves the inbox when the turn is stored
(before `final_result` hooks run); what a crash left unanswered is answered at start-up, or, when too old, its
sender is told the bot restarted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from core.history import HistoryStore
from core.plugin import BasePlugin, on
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

SID = "test:dm:user"


def _record(text: str) -> dict:
    return {"text": text, "user_id": "user", "nickname": "", "adapter": "test", "type": "dm", "id": "user",
            "group_id": None, "message_id": "m1", "is_mentioned": True}


async def _leave_unanswered(data: Path, text: str, age: float) -> None:
    """What a crash leaves: a message recorded in the inbox whose turn never ended."""
    async with HistoryStore(data / "history.sqlite3") as store:
        store.record_received(SID, _record(text), time.time() - age)  # committed by the close


async def test_the_turn_is_stored_before_final_result_hooks_run(tmp_path: Path) -> None:
    seen: list[list[str]] = []

    class Memory(BasePlugin):
        @on.final_result()
        async def remember(self, event, chain, *_):
            seen.append([m.content for m in await self.ctx.app.history.get_history(event.sid)])
            seen.append([text for _, _, _, data in await self.ctx.app.history.unfinished()
                         for text in [data["text"]]])

    async with ChatHarness([Memory], ScriptedProvider(["<msg>hi</msg>"])) as bot:
        await bot.send("hello")

    assert seen == [["hello", "<msg>hi</msg>"], []]


async def test_a_recent_unanswered_message_is_answered_at_start_up(tmp_path: Path) -> None:
    await _leave_unanswered(tmp_path, "are you there?", age=5)

    config = {"data": {"dir": str(tmp_path)}}
    async with ChatHarness(provider=ScriptedProvider(["<msg>yes</msg>"]), config=config) as bot:
        await bot.app.scheduler.join()
        left = await bot.app.history.unfinished()
        stored = await bot.app.history.get_history(SID)

    assert [c.message_repr for c in bot.sent] == ["yes"]
    assert left == [] and [m.content for m in stored] == ["are you there?", "<msg>yes</msg>"]


async def test_an_old_unanswered_message_gets_a_restart_notice_not_silence(tmp_path: Path) -> None:
    await _leave_unanswered(tmp_path, "what time is it?", age=3600)

    config = {"data": {"dir": str(tmp_path)}, "limits": {"unanswered_max_age": 60}}
    async with ChatHarness(provider=ScriptedProvider(), config=config) as bot:
        await bot.app.scheduler.join()
        left = await bot.app.history.unfinished()

    [notice] = [c.message_repr for c in bot.sent]
    assert "restarted" in notice and "what time is it?" in notice
    assert left == []


async def test_a_discarded_message_leaves_the_inbox_at_once(tmp_path: Path) -> None:
    async with ChatHarness(builtins=()) as bot:  # no chat plugin: the default strategy discards
        assert await bot.send("nobody listens") == []
        assert await bot.app.history.unfinished() == []
