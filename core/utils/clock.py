"""Time as the framework's timers see it: `Clock` is what a debounce or an idle sweep needs (now, call later,
sleep), `LoopClock` is the real one (the event loop's monotonic time). The testing kit's `ManualClock` implements
the same protocol and moves only when a test says so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Protocol

__all__ = ["Clock", "TimerHandle", "LoopClock"]


class TimerHandle(Protocol):
    """A callback scheduled with `Clock.call_later`."""

    def cancel(self) -> None:
        """Do not run the callback (no effect once it ran)."""


class Clock(Protocol):
    """Monotonic time in seconds, callbacks after a delay, and sleeping."""

    def now(self) -> float:
        """The current time (monotonic, in seconds)."""
        ...

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> TimerHandle:
        """Run `callback(*args)` on the event loop after `delay` seconds."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Suspend the caller for `seconds`."""


class LoopClock:
    """The real clock: the running event loop's time, `loop.call_later` and `asyncio.sleep`."""

    def now(self) -> float:
        """The event loop's monotonic time (`time.monotonic` outside a loop)."""
        try:
            return asyncio.get_running_loop().time()
        except RuntimeError:  # outside a loop: the loop's own clock is time.monotonic too
            return time.monotonic()

    def call_later(self, delay: float, callback: Callable[..., Any], *args: Any) -> asyncio.TimerHandle:
        """`loop.call_later` on the running loop."""
        return asyncio.get_running_loop().call_later(delay, callback, *args)

    async def sleep(self, seconds: float) -> None:
        """`asyncio.sleep`."""
        await asyncio.sleep(seconds)
