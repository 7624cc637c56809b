"""`DelayedTyping`, the typing indicator the Telegram and Discord adapters share: a quick answer shows none, a slow one
shows it from `after` seconds on until the call ends, each call its own, whenever it began."""

from __future__ import annotations

import asyncio

import pytest

from core.adapter.adapter_utils import DelayedTyping

pytestmark = pytest.mark.anyio

AFTER = 0.1


class Indicators:
    """Which calls' indicators started, and which are still shown."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.shown: set[str] = set()

    def keep(self, name: str):
        async def keep() -> None:
            self.started.append(name)
            self.shown.add(name)
            try:
                await asyncio.Event().wait()  # renewed until cancelled
            finally:
                self.shown.discard(name)

        return keep


async def test_a_quick_call_shows_nothing_and_a_slow_one_shows_it_until_it_ends() -> None:
    typing, seen = DelayedTyping(AFTER, "typing"), Indicators()
    async with typing.held(seen.keep("quick")):
        await asyncio.sleep(AFTER / 4)
    async with typing.held(seen.keep("slow")):
        await asyncio.sleep(AFTER * 2)
        assert seen.shown == {"slow"}
    assert seen.started == ["slow"] and seen.shown == set()
    await asyncio.sleep(AFTER * 2)
    assert seen.started == ["slow"]  # the quick call's time came after it ended: nothing started late


async def test_calls_that_overlap_each_get_their_indicator_when_their_own_time_comes() -> None:
    typing, seen = DelayedTyping(AFTER, "typing"), Indicators()

    async def call(name: str, begin: float, length: float) -> None:
        await asyncio.sleep(begin)
        async with typing.held(seen.keep(name)):
            await asyncio.sleep(length)
            if length > AFTER * 1.5:
                assert name in seen.shown

    await asyncio.gather(
        call("first", 0, AFTER * 3),
        call("quick", AFTER * 0.2, AFTER * 0.3),
        call("second", AFTER * 0.5, AFTER * 2),
        call("late", AFTER * 2.5, AFTER * 2),
    )
    assert seen.started == ["first", "second", "late"] and seen.shown == set()
