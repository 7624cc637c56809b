"""The durable inbox: a received message is recorded before its turn and leaves the inbox when the turn is stored
(before `final_result` hooks run); what a crash left unanswered is answered at start-up, or, when too old, its
sender is told the bot restarted."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from pathlib import Path

import pytest

from core.chat import MessageChain
from core.chat.message_elements import Text
from core.history import HistoryStore
from core.plugin import BasePlugin, on
from core.provider import LLMProvider, LLMResponse
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

SID = "test:dm:user"


def _record(text: str) -> dict:
    return {
        "text": text,
        "user_id": "user",
        "nickname": "",
        "adapter": "test",
        "type": "dm",
        "id": "user",
        "group_id": None,
        "message_id": "m1",
        "is_mentioned": True,
    }


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
            seen.append([text for _, _, _, data in await self.ctx.app.history.unfinished() for text in [data["text"]]])

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


class HeldModel(LLMProvider):
    """A model whose answers wait until `release()`: a turn stays running while the test acts."""

    name = "held"

    def __init__(self) -> None:
        self.gate = asyncio.Event()
        self.started = asyncio.Event()
        self.prompts: list[str] = []

    def release(self) -> None:
        self.gate.set()

    async def complete(self, req):
        self.prompts.append(str(req.user_prompt))
        self.started.set()
        await self.gate.wait()
        return LLMResponse(text_response="<msg>done</msg>")


async def test_a_stopped_answer_is_not_answered_again_after_a_restart(tmp_path: Path) -> None:
    config = {"data": {"dir": str(tmp_path)}}
    model = HeldModel()
    async with ChatHarness(provider=model, config=config) as bot:
        received = await bot.app.receive(bot.message("tell me a long story"))
        turn = bot.app.flush(received.event.session)
        await model.started.wait()
        assert bot.app.cancel_turn(received.event.session), "Ctrl-C / the console's Stop"
        await asyncio.wait([turn])
        assert turn.cancelled()
        left = await bot.app.history.unfinished()
    assert left == [], "a stopped answer is done: it left the inbox"

    async with ChatHarness(provider=ScriptedProvider(), config=config) as bot:
        await bot.app.scheduler.join()
        assert bot.sent == [] and await bot.app.history.unfinished() == []


async def test_a_queued_turn_taken_back_before_it_starts_is_not_run_and_leaves_the_inbox() -> None:
    model = HeldModel()
    async with ChatHarness(provider=model, plugins=[_Trigger], builtins=()) as bot:
        first = (await bot.app.receive(bot.message("first"))).turn
        await model.started.wait()
        second = (await bot.app.receive(bot.message("second"))).turn
        second.cancel()  # the console's Ctrl-C on a queued answer
        model.release()
        await bot.app.scheduler.join()
        assert first.done() and not first.cancelled()
        assert model.prompts == ["first"], "the taken-back message was never answered"
        assert await bot.app.history.unfinished() == []


async def test_reset_forgets_the_messages_waiting_for_an_answer_and_the_inbox_with_them(tmp_path: Path) -> None:
    config = {"data": {"dir": str(tmp_path)}}
    model = HeldModel()
    async with ChatHarness(provider=model, plugins=[_Trigger], config=config) as bot:
        running = (await bot.app.receive(bot.message("first"))).turn
        await model.started.wait()
        waiting = [(await bot.app.receive(bot.message(f"later {i}"))).turn for i in range(3)]
        assert bot.app.scheduler.waiting("test:dm:user") == 3
        await bot.app.receive(bot.message("/reset"))  # the commands plugin answers it at once
        assert all(t.cancelled() for t in waiting)
        assert [m["text"] for _, _, _, m in await bot.app.history.unfinished()] == ["first"], "only the running turn"
        model.release()
        await running
        assert model.prompts == ["first"] and await bot.app.history.unfinished() == []
        assert any("Forgot this conversation" in c.plain_text for c in bot.sent)


async def test_recovery_answers_in_arrival_order(tmp_path: Path) -> None:
    texts = [f"message {i}" for i in range(40)]  # random inbox ids would put them in a random order
    async with HistoryStore(tmp_path / "history.sqlite3") as store:
        now = time.time()
        for text in texts:
            store.record_received(SID, _record(text), now)  # one instant: only the sequence tells them apart
    provider = ScriptedProvider(["<msg>ok</msg>"])
    async with ChatHarness(provider=provider, config={"data": {"dir": str(tmp_path)}}) as bot:
        await bot.app.scheduler.join()
    [request] = provider.requests
    assert [p.content.split("] ", 1)[1] for p in request.user_prompt] == texts


async def test_an_inbox_of_an_earlier_version_opens_and_is_recovered_in_arrival_order(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    with sqlite3.connect(db) as conn:  # the table as hookchat 0.1 made it: a UUID key, no sequence
        conn.execute(
            "CREATE TABLE inbox (id TEXT PRIMARY KEY, sid TEXT NOT NULL, received_at REAL NOT NULL, "
            "message TEXT NOT NULL)"
        )
        now = time.time()
        # UUID order is the reverse of arrival here: the ids sort z..., y..., x...
        for n, key in enumerate(["zz", "yy", "xx"]):
            conn.execute(
                "INSERT INTO inbox VALUES (?, ?, ?, ?)", (key, SID, now - 10 + n, json.dumps(_record(f"old {n}")))
            )
    provider = ScriptedProvider(["<msg>ok</msg>", "<msg>again</msg>"])
    async with ChatHarness(provider=provider, config={"data": {"dir": str(tmp_path)}}) as bot:
        await bot.app.scheduler.join()
        assert await bot.send("new") == [MessageChain([Text("again")])], "the migrated inbox takes new messages"
        assert await bot.app.history.unfinished() == []
    assert [p.content.split("] ", 1)[1] for p in provider.requests[0].user_prompt] == ["old 0", "old 1", "old 2"]


async def test_a_message_past_its_attempts_is_set_aside_listed_and_its_sender_told(tmp_path: Path) -> None:
    db = tmp_path / "history.sqlite3"
    async with HistoryStore(db) as store:
        poison = store.record_received(SID, _record("the bad one"), time.time())
        fine = store.record_received(SID, _record("a fine one"), time.time())
        await store.start_attempt([poison])
        await store.start_attempt([poison])
    provider = ScriptedProvider(["<msg>fine</msg>"])
    config = {"data": {"dir": str(tmp_path)}, "limits": {"message_attempts": 2}}
    async with ChatHarness(provider=provider, config=config) as bot:
        await bot.app.scheduler.join()
        poisoned = await bot.app.inbox.poisoned()
        assert await bot.app.history.unfinished() == []
    assert [e.id for e in poisoned] == [poison] and poisoned[0].attempts == 2 and poisoned[0].set_aside_at
    assert fine not in [e.id for e in poisoned]
    notice, answer = [c.plain_text for c in bot.sent]
    assert "stopped trying" in notice and "the bad one" in notice and answer == "fine"
    assert str(provider.requests[0].user_prompt) == "a fine one", "the poison message is not in the turn"


class _Trigger(BasePlugin):
    @on.im_message()
    async def now(self, event, *_):
        if not event.message_repr.startswith("/"):
            event.trigger()


@pytest.mark.parametrize("where", ["step_result", "message_sent"])  # after the send, and while it is under way
async def test_a_turn_stopped_by_shutdown_after_its_reply_went_out_is_not_answered_again(
    tmp_path: Path, where: str
) -> None:
    """A shutdown cancels running turns; one that already sent its reply, or was sending it (the platform may show
    it), is stored on the way out, so the next start does not answer its message a second time (only a turn that
    sent nothing is answered again)."""
    replied = asyncio.Event()

    async def linger(self, event, *_):
        replied.set()
        await asyncio.Event().wait()  # still running when the bot stops

    SlowAfterReply = type("SlowAfterReply", (BasePlugin,), {"linger": getattr(on, where)()(linger)})

    config = {"data": {"dir": str(tmp_path)}, "deadlines": {"hook_default": 600}}
    async with ChatHarness([SlowAfterReply], ScriptedProvider(["<msg>on it</msg>"]), config=config) as bot:
        await bot.app.receive(bot.message("hello"))
        await asyncio.wait_for(replied.wait(), 30)
    assert [c.message_repr for c in bot.sent] == ["on it"]

    async with ChatHarness(provider=ScriptedProvider(), config=config) as again:
        await again.app.scheduler.join()
        left = await again.app.history.unfinished()
        stored = await again.app.history.get_history(SID)

    assert again.sent == [], "the message was answered once, before the stop"
    assert left == []
    # A reply still being sent is not in history yet (its receipt never came); one that was sent is.
    assert [m.content for m in stored] == ["hello"] + (["<msg>on it</msg>"] if where == "step_result" else [])
