"""End-to-end turns per second with `ScriptedProvider`, 20 plugins hooking all nine events, history on (SQLite),
at 100, 1,000 and 10,000 sessions, pinned to one core; and retained memory per idle session. The framework's
figures are taken with tracing off; one more line shows the same turns with tracing on as it is by default (every
hook recorded, each trace kept in the ring and written to the JSON-lines file).

Run: .venv/bin/python bench/pipeline.py
Baselines in the same run: the 100-session figure, and the same turns with no plugins loaded.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.plugin import BasePlugin, on
from core.testing import ChatHarness, ScriptedProvider

TURNS = 20_000
REPLY = "<msg><text>Hello there!</text></msg>"


def make_plugin(index: int) -> type:
    class Hooks(BasePlugin):
        @on.im_message()
        async def a(self, event, *_):
            event.buffer()

        @on.message_buffered()
        async def b(self, event, *_):
            pass

        @on.im_batch_message()
        async def c(self, event, *_):
            pass

        @on.llm_request()
        async def d(self, event, req, tag_set, *_):
            pass

        @on.llm_response()
        async def e(self, event, resp, *_):
            pass

        @on.after_xml_parse()
        async def f(self, event, chain, *_):
            pass

        @on.tool_result()
        async def g(self, event, result, *_):
            pass

        @on.step_result()
        async def h(self, event, resp, *_):
            pass

        @on.final_result()
        async def i(self, event, chain, *_):
            pass

    Hooks.__name__ = f"Hooks{index:02d}"
    return Hooks


PLUGINS = [make_plugin(i) for i in range(20)]


class Buffer(BasePlugin):
    @on.im_message()
    async def buffer(self, event, *_):
        event.buffer()


TRACING_OFF = {"trace": {"enabled": False}}


async def run(sessions: int, plugins: list[type], turns: int = TURNS, config: dict | None = TRACING_OFF) -> float:
    """Turns per second of `sessions` users talking at once, each sending its next message when the last one is
    answered (a session's later messages would otherwise join its waiting batch, one turn for several)."""
    provider = ScriptedProvider([REPLY] * turns)
    async with ChatHarness(plugins=plugins, provider=provider, builtins=("builtin_tags",), config=config) as bot:
        app = bot.app
        rounds = max(1, turns // sessions)
        messages = [[bot.message(f"message {r}", user_id=f"user{s}") for r in range(rounds)] for s in range(sessions)]

        async def user(mine: list) -> None:
            for message in mine:
                await app.respond(message)

        start = time.perf_counter()
        await asyncio.gather(*(user(mine) for mine in messages))
        elapsed = time.perf_counter() - start
        assert len(bot.adapter.sent) == rounds * sessions, (len(bot.adapter.sent), rounds * sessions)
        return rounds * sessions / elapsed


async def idle_memory(sessions: int) -> float:
    provider = ScriptedProvider([REPLY] * (2 * sessions))
    async with ChatHarness(plugins=[Buffer], provider=provider, builtins=(), config=TRACING_OFF) as bot:
        app = bot.app
        for s in range(50):  # warm caches before measuring
            await app.receive(bot.message("hi", user_id=f"warm{s}"))
            await app.pipeline.flush(f"test:dm:warm{s}")
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        for s in range(sessions):
            message = bot.message("hi", user_id=f"user{s}")
            await app.receive(message)
            await app.pipeline.flush(message.session)
        bot.adapter.sent.clear()
        provider.requests.clear()
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
        tracemalloc.stop()
        return (after - before) / sessions


async def main() -> None:
    logging.disable(logging.WARNING)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    await run(100, PLUGINS, turns=2_000)  # warm-up: imports, first database, parser caches
    bare = await run(100, [Buffer])
    print(f"baseline, no plugins, 100 sessions: {bare:,.0f} turns/s")
    results = {}
    for sessions in (100, 1_000, 10_000):
        results[sessions] = await run(sessions, PLUGINS)
        print(
            f"20 plugins x 9 events, {sessions:>6,} sessions: {results[sessions]:,.0f} turns/s"
            f"  ({results[sessions] / bare:.2f}x the no-plugin baseline)"
        )
    traced = await run(1_000, PLUGINS, config=None)
    print(
        f"20 plugins x 9 events,  1,000 sessions, tracing on (the default): {traced:,.0f} turns/s"
        f"  ({traced / results[1_000]:.2f}x tracing off)"
    )
    ratio = results[10_000] / results[100]
    print(f"10,000 sessions run at {ratio:.2f}x the 100-session rate (target: at least 0.90x, and 1,000 turns/s)")
    per_session = await idle_memory(10_000)
    print(f"retained memory per idle session (Python heap, tracemalloc): {per_session:,.0f} bytes (target: 2 KB)")


if __name__ == "__main__":
    asyncio.run(main())
