"""Per-event dispatch overhead of the hook engine against a bare loop awaiting the same hooks, in one run, with
tracing off (the default engine) and on (every dispatch recorded into a turn's trace, 20 dispatches per turn,
finished traces kept in the ring).

Run: .venv/bin/python bench/dispatch.py
Deadlines and isolation are on (the engine's defaults); each figure is the best of many short rounds, the three
interleaved. Many short rounds (160 of 1,000 events, a few milliseconds each) rather than a few long ones because
the machines this runs on are shared: a round that another process interrupts is simply not the best one, and
short rounds fit between interruptions, so the ratios hold still under load (with 15 rounds of 10,000 events the
traced ratio at 10 hooks read anything from 3.1 to 5.3 while other processes were busy; with these, within 0.1).
The work per event and the baseline are unchanged.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.chat.message_utils import KiraEvent
from core.plugin import HookEngine, on
from core.trace import Tracer

EVENTS = 1_000
ROUNDS = 160
PER_TURN = 20  # dispatches per turn: a turn with a tool call and two messages has about that many


def make_plugin(index: int) -> object:
    class NoOp:
        @on.im_message(priority=index % 3)
        async def hook(self, event, *args, **kwargs):
            return None

    NoOp.__name__ = f"NoOp{index}"
    return NoOp()


async def measure(hooks: int) -> tuple[float, float, float]:
    engine = HookEngine(default_deadline=10.0)
    traced = HookEngine(default_deadline=10.0, tracer=Tracer(ring_size=200))
    plugins = [make_plugin(i) for i in range(hooks)]
    for i, plugin in enumerate(plugins):
        engine.register(plugin, name=f"p{i:03d}")
        traced.register(plugin, name=f"p{i:03d}")
    fns = [entry.fn for entry in engine.chain("im_message")]
    event = KiraEvent()

    async def bare_dispatch(event) -> None:
        """The baseline: a bare loop awaiting the same hooks in order, with no deadline and no isolation."""
        for fn in fns:
            if event.is_stopped:
                break
            await fn(event)

    async def run_plain(dispatch) -> float:
        start = time.perf_counter()
        for _ in range(EVENTS):
            await dispatch(event)
        return (time.perf_counter() - start) / EVENTS

    async def run_traced() -> float:
        tracer, dispatch = traced.tracer, traced.dispatch
        start = time.perf_counter()
        for _ in range(EVENTS // PER_TURN):
            trace = tracer.begin("turn", "bench")
            with tracer.activate(trace):
                for _ in range(PER_TURN):
                    await dispatch("im_message", event)
            tracer.finish(trace, "completed")
        return (time.perf_counter() - start) / EVENTS

    await engine.dispatch("im_message", event)  # start the watchdogs outside the measurement
    await traced.dispatch("im_message", event)
    # Rounds interleave the three, so a busy machine slows each of them alike; each figure is the best round.
    bare_s = engine_s = traced_s = float("inf")
    engine_dispatch = _bind(engine)
    for _ in range(ROUNDS):
        bare_s = min(bare_s, await run_plain(bare_dispatch))
        engine_s = min(engine_s, await run_plain(engine_dispatch))
        traced_s = min(traced_s, await run_traced())
    await engine.aclose()
    await traced.aclose()
    return bare_s, engine_s, traced_s


def _bind(engine: HookEngine):
    def dispatch(event):
        return engine.dispatch("im_message", event)

    return dispatch


#: The targets at 10 hooks (issue 26): the engine's time per event against the bare loop's, tracing off and on.
TARGET_HOOKS, TARGET_RATIO, TARGET_TRACED = 10, 1.5, 2.5


async def main() -> None:
    print(
        f"{'hooks':>5} {'bare us/event':>14} {'engine us/event':>16} {'ratio':>6}"
        f" {'traced us/event':>16} {'traced ratio':>13}"
    )
    at_target = (0.0, 0.0)
    for hooks in (1, 10, 50):
        bare_s, engine_s, traced_s = await measure(hooks)
        print(
            f"{hooks:>5} {bare_s * 1e6:>14.2f} {engine_s * 1e6:>16.2f} {engine_s / bare_s:>6.2f}"
            f" {traced_s * 1e6:>16.2f} {traced_s / bare_s:>13.2f}"
        )
        if hooks == TARGET_HOOKS:
            at_target = (engine_s / bare_s, traced_s / bare_s)
    ratio, traced = at_target
    print(
        f"target at {TARGET_HOOKS} hooks: ratio <= {TARGET_RATIO} (tracing off): {ratio:.2f}, {_met(ratio, TARGET_RATIO)}"
    )
    print(
        f"target at {TARGET_HOOKS} hooks: traced ratio <= {TARGET_TRACED} (tracing on): {traced:.2f}, "
        f"{_met(traced, TARGET_TRACED)}"
    )


def _met(value: float, target: float) -> str:
    return "met" if value <= target else "not met"


if __name__ == "__main__":
    asyncio.run(main())
