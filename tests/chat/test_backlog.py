"""A session's backlog is bounded: messages that arrive while its turn runs join the one batch that waits, at most
`[limits] max_waiting_messages` of them; past it the rest are refused, leave the inbox, and the session is told
once per filling. A 3,000-event flood into one group with slow turns keeps order and keeps memory flat."""

from __future__ import annotations

import asyncio
import gc

import pytest

from core.provider import LLMProvider, LLMRequest, LLMResponse
from core.testing import ChatHarness, ManualClock

pytestmark = pytest.mark.anyio

GROUP = "g1"
SID = f"test:gm:{GROUP}"


class GatedModel(LLMProvider):
    """A slow model: each turn waits for `release()`, then answers with the texts of its messages, one a line."""

    name = "gated"

    def __init__(self) -> None:
        self.gate: asyncio.Queue[None] = asyncio.Queue()
        self.started = 0
        self.batches: list[list[str]] = []

    def release(self, turns: int = 1) -> None:
        for _ in range(turns):
            self.gate.put_nowait(None)

    async def complete(self, req: LLMRequest) -> LLMResponse:
        self.started += 1
        await self.gate.get()
        texts = [p.content.split("] ", 1)[-1] for p in req.user_prompt]
        self.batches.append(texts)
        return LLMResponse(text_response=f"<msg>answered {len(texts)}</msg>")


def _objects() -> int:
    """Objects the garbage collector tracks, after a collection: what the process holds."""
    gc.collect()
    return len(gc.get_objects())


async def _settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def _flood(
    bot: ChatHarness, model: GatedModel, first: int, count: int, release_every: int, sizes: list[tuple[int, int]]
) -> None:
    app = bot.app
    for i in range(first, first + count):
        await app.receive(bot.message(f"m{i}", user_id=f"u{i % 7}", group_id=GROUP, mentioned=True))
        sizes.append((app.scheduler.batches(SID), app.scheduler.waiting(SID) + app.buffers.size(SID)))
        if i % release_every == release_every - 1:
            model.release()
            await _settle()


async def test_a_flood_into_one_group_keeps_order_bounds_the_backlog_and_tells_the_group():
    model = GatedModel()
    clock = ManualClock()  # the chat plugin's quiet timer never fires: only its flush after 5 messages
    limit = 200
    # Tracing off: this measures the backlog. The trace ring holds its last `ring_size` (200) traces, a turn counted
    # once per message it answered (tests/trace/test_turn_trace.py), which here is up to some 15,000 objects of
    # message traces whatever the flood's length: bounded, but as large as this test's margin.
    config = {"limits": {"max_waiting_messages": limit}, "trace": {"enabled": False}}
    async with ChatHarness(provider=model, clock=clock, config=config) as bot:
        sizes: list[tuple[int, int]] = []
        await _flood(bot, model, 0, 1_000, 250, sizes)
        await bot.app.history.sessions()  # the database's queue is first in, first out: its writes are done now
        after_1000 = _objects()
        await _flood(bot, model, 1_000, 2_000, 250, sizes)
        await bot.app.history.sessions()  # (on a busy machine its thread lags, and queued writes are objects too)
        after_3000 = _objects()
        model.release(10_000)
        await bot.app.scheduler.join()
        left = await bot.app.history.unfinished()
        notices = [c.plain_text for c in bot.sent if "Too many messages" in c.plain_text]

    assert max(batches for batches, _ in sizes) == 2, "one running batch and one waiting, never more"
    assert max(waiting for _, waiting in sizes) <= limit + 5, "the waiting batch plus one buffer of the chat plugin"
    answered = [text for batch in model.batches for text in batch]
    numbers = [int(text[1:]) for text in answered]
    assert numbers == sorted(numbers) and len(set(numbers)) == len(numbers), "in arrival order, none twice"
    assert len(model.batches) < 3_000 / 5, "messages that came during a turn joined one batch"
    assert len(answered) < 3_000, "the backlog was capped: some were refused"
    assert notices and len(notices) <= len(model.batches), "the group was told, once per filling, not per message"
    assert left == [], "refused messages left the inbox: a restart does not answer them"
    # Memory is flat: after 3,000 events the process holds about what it held after 1,000 (each held event is a
    # dozen objects or more: without the cap, the 2,000 more add some 50,000). The bound leaves room for what the
    # rest of a full test run adds meanwhile (pytest keeps each log record of a test).
    assert after_3000 - after_1000 < 20_000, (after_1000, after_3000)


async def test_without_a_running_turn_a_flush_starts_a_turn_at_once_and_nothing_is_refused():
    model = GatedModel()
    async with ChatHarness(provider=model, clock=ManualClock(), config={"limits": {"max_waiting_messages": 3}}) as bot:
        for i in range(5):  # the chat plugin flushes the fifth: a batch of 5, more than the cap of 3
            await bot.app.receive(bot.message(f"m{i}", group_id=GROUP, mentioned=True))
        await _settle()
        model.release()
        await bot.app.scheduler.join()
        notices = [c.plain_text for c in bot.sent if "Too many messages" in c.plain_text]
    assert model.batches == [["m0", "m1", "m2"]] and len(notices) == 1, "past the cap even for the first batch"
