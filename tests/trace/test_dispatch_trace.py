"""What the engine records of one dispatch: each hook with its plugin, outcome and timing, for an event outside any
turn (it gets a trace of its own), while a hook is still running, and when the dispatch is cancelled from outside
(the message it ran for let go, its own trace finished)."""

import asyncio
import itertools

import pytest

from core.chat.message_utils import KiraEvent, KiraMessageEvent
from core.plugin import HookEngine, on
from core.testing import ChatHarness, ScriptedProvider
from core.trace import Tracer, current_trace

pytestmark = pytest.mark.anyio


class Hooks:
    @on.im_message(priority=3)
    async def first(self, event, *_):
        pass

    @on.im_message(priority=2)
    async def boom(self, event, *_):
        raise ValueError("boom")

    @on.im_message(priority=1, deadline=0.05)
    async def sleepy(self, event, *_):
        await asyncio.sleep(5)

    @on.im_message(priority=0)
    async def stopper(self, event, *_):
        event.stop()

    @on.im_message(priority=-1)
    async def never(self, event, *_):
        raise AssertionError("runs after the stop")


def outcomes(calls):
    return [(c.plugin_id, c.function, c.outcome) for c in calls]


async def test_an_event_outside_a_turn_gets_a_trace_with_every_hook_and_its_outcome():
    tracer = Tracer()
    engine = HookEngine(tracer=tracer)
    engine.register(Hooks(), name="hooks")
    try:
        await engine.dispatch("im_message", KiraEvent())
    finally:
        await engine.aclose()
    [trace] = tracer.recent(kind="event")
    assert trace.outcome == "stopped"
    calls = trace.hook_calls()
    assert outcomes(calls) == [
        ("hooks", "first", "returned"),
        ("hooks", "boom", "raised"),
        ("hooks", "sleepy", "timed_out"),
        ("hooks", "stopper", "stopped"),
    ]
    assert "ValueError: boom" in calls[1].error and "raise ValueError" in calls[1].traceback
    assert calls[2].duration_ms >= 40, "the timed-out hook ran until its deadline"
    starts = [c.start_ms for c in calls]
    assert starts == sorted(starts) and all(c.duration_ms >= 0 for c in calls)
    for before, after in itertools.pairwise(calls):
        assert after.start_ms == pytest.approx(before.start_ms + before.duration_ms, abs=0.002), "no gaps"
    [item] = trace.to_dict()["timeline"]
    assert item["event"] == "im_message" and item["stopped_by"] == "hooks.stopper"
    assert item["duration_ms"] == pytest.approx(sum(c.duration_ms for c in calls), abs=0.01)


class Slow:
    """A quick hook, then one that runs until it is cancelled."""

    @on.im_message(priority=1)
    async def quick(self, event, *_):
        if isinstance(event, KiraMessageEvent):
            event.trigger()

    @on.im_message(priority=0)
    async def slow(self, event, *_):
        await asyncio.sleep(5)


async def test_a_hook_still_running_and_a_dispatch_cancelled_from_outside():
    tracer = Tracer()
    engine = HookEngine(default_deadline=10.0, tracer=tracer)
    engine.register(Slow(), name="slow")
    trace = tracer.begin("turn", "cancelled turn")
    try:
        with tracer.activate(trace):
            task = asyncio.ensure_future(engine.dispatch("im_message", KiraEvent()))
            await asyncio.sleep(0.02)
            running = trace.hook_calls()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        tracer.finish(trace, "cancelled")
    finally:
        await engine.aclose()
    assert [c.function for c in running] == ["quick", "slow"], "a running trace shows the hook that runs now"
    calls = trace.hook_calls()
    assert outcomes(calls) == [("slow", "quick", "returned"), ("slow", "slow", "cancelled")]
    # The cancelled hook's end is the trace's end (no reading of its own): later than when it was seen running.
    assert calls[1].duration_ms > running[1].duration_ms, "the cancelled hook ran until the trace ended"


async def test_a_cancelled_dispatch_lets_its_message_go_and_finishes_its_own_trace():
    tracer = Tracer()
    engine = HookEngine(default_deadline=10.0, tracer=tracer)
    engine.register(Slow(), name="slow")
    async with ChatHarness(plugins=[], provider=ScriptedProvider([])) as bot:
        event = KiraMessageEvent(bot.message("hi"))
    try:
        # Outside any turn, the dispatch has a trace of its own.
        task = asyncio.ensure_future(engine.dispatch("im_message", event))
        await asyncio.sleep(0.02)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await engine.aclose()
    [trace] = tracer.recent(kind="event")
    assert (trace.outcome, trace.error) == ("cancelled", "the dispatch was cancelled")
    assert current_trace() is None
    calls = trace.hook_calls()
    assert outcomes(calls) == [("slow", "quick", "returned"), ("slow", "slow", "cancelled")]
    assert calls[0].strategy == {"strategy": "trigger", "force": False}
    # The event is no longer watched by the cancelled dispatch: a later change is not put on its hooks.
    assert event.strategy_watcher is None
    event.discard()
    assert [c.strategy for c in trace.hook_calls()] == [c.strategy for c in calls]
