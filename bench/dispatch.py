"""Per-event dispatch overhead of the hook engine against a bare loop awaiting the same hooks, in one run.

Run: .venv/bin/python bench/dispatch.py
Deadlines and isolation are on (the engine's defaults); each figure is the best of several rounds.
"""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.chat.message_utils import KiraEvent  # noqa: E402
from core.plugin import HookEngine, on  # noqa: E402

EVENTS = 20_000
ROUNDS = 7


def make_plugin(index: int) -> object:
    class NoOp:
        @on.im_message(priority=index % 3)
        async def hook(self, event, *args, **kwargs):
            return None

    NoOp.__name__ = f"NoOp{index}"
    return NoOp()


async def measure(hooks: int) -> tuple[float, float]:
    engine = HookEngine(default_deadline=10.0)
    plugins = [make_plugin(i) for i in range(hooks)]
    for i, plugin in enumerate(plugins):
        engine.register(plugin, name=f"p{i:03d}")
    fns = [entry.fn for entry in engine.chain("im_message")]
    event = KiraEvent()

    async def bare_dispatch(event) -> None:
        """The baseline: a bare loop awaiting the same hooks in order, with no deadline and no isolation."""
        for fn in fns:
            if event.is_stopped:
                break
            await fn(event)

    async def timed(dispatch) -> float:
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(EVENTS):
                await dispatch(event)
            best = min(best, (time.perf_counter() - start) / EVENTS)
        return best

    await engine.dispatch("im_message", event)  # start the watchdogs outside the measurement
    bare_s = await timed(bare_dispatch)
    engine_s = await timed(_bind(engine))
    await engine.aclose()
    return bare_s, engine_s


def _bind(engine: HookEngine):
    def dispatch(event):
        return engine.dispatch("im_message", event)

    return dispatch


async def main() -> None:
    print(f"{'hooks':>5} {'bare us/event':>14} {'engine us/event':>16} {'ratio':>6}")
    for hooks in (1, 10, 50):
        bare_s, engine_s = await measure(hooks)
        print(f"{hooks:>5} {bare_s * 1e6:>14.2f} {engine_s * 1e6:>16.2f} {engine_s / bare_s:>6.2f}")
    print("target: ratio <= 2.0 at 10 hooks")


if __name__ == "__main__":
    asyncio.run(main())
