"""Benchmark of core.history: append and read-newest-N cost at 100, 10,000 and 100,000 stored turns (should be flat),
then turns/s of a pipeline-like load (read the history, append the turn) over 10,000 sessions.

Run: .venv/bin/python bench/history.py [--all-cores] [--sizes 100,10000,100000]. Pinned to one CPU by default.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from core.history import HistoryStore
from core.provider.llm import ChatMessage

TURNS_PER_SESSION = 100
SAMPLES = 2000


def a_turn(i: int) -> list[ChatMessage]:
    """A typical turn: a 200-character question and a 600-character answer (about 1 KB stored)."""
    return [ChatMessage("user", f"question {i} " + "q" * 190), ChatMessage("assistant", f"answer {i} " + "a" * 590)]


async def fill(store: HistoryStore, sids: list[str], per_session: int, concurrency: int = 256) -> None:
    """Append `per_session` turns to every session, `concurrency` sessions at a time."""
    queue = list(sids)

    async def worker() -> None:
        while queue:
            sid = queue.pop()
            for i in range(per_session):
                await store.append_turn(sid, a_turn(i))

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def timed(n: int, op) -> float:
    """Microseconds per call of `op(i)`, one awaited after the other."""
    start = time.perf_counter()
    for i in range(n):
        await op(i)
    return (time.perf_counter() - start) / n * 1e6


async def timed_concurrent(n: int, op) -> float:
    """Microseconds per call when `n` calls are in flight together (what a call costs the store, amortised)."""
    start = time.perf_counter()
    await asyncio.gather(*(op(i) for i in range(n)))
    return (time.perf_counter() - start) / n * 1e6


async def flatness(directory: Path, sizes: list[int]) -> None:
    print(f"cost per call at N stored turns ({TURNS_PER_SESSION} turns a session, newest 50 read, {SAMPLES} samples)")
    print(f"{'stored':>8} {'append':>10} {'append':>12} {'read 50':>10} {'read 50':>12} {'fill':>8}")
    print(f"{'turns':>8} {'latency':>10} {'amortised':>12} {'latency':>10} {'amortised':>12} {'turns/s':>8}")
    for size in sizes:
        sids = [f"bench:dm:{n}" for n in range(max(1, size // TURNS_PER_SESSION))]
        async with HistoryStore(directory / f"flat-{size}.sqlite3", max_turns=50) as store:
            start = time.perf_counter()
            await fill(store, sids, TURNS_PER_SESSION)
            fill_rate = len(sids) * TURNS_PER_SESSION / (time.perf_counter() - start)
            rnd = random.Random(size)
            picks = [rnd.choice(sids) for _ in range(SAMPLES)]
            read_lat = await timed(SAMPLES, lambda i, picks=picks: store.get_history(picks[i]))
            read_amo = await timed_concurrent(SAMPLES, lambda i, picks=picks: store.get_history(picks[i]))
            app_lat = await timed(SAMPLES, lambda i, picks=picks: store.append_turn(picks[i], a_turn(i)))
            app_amo = await timed_concurrent(SAMPLES, lambda i, picks=picks: store.append_turn(picks[i], a_turn(i)))
        print(
            f"{size:>8} {app_lat:>8.0f}us {app_amo:>10.1f}us {read_lat:>8.0f}us {read_amo:>10.1f}us {fill_rate:>8.0f}"
        )


async def pipeline(directory: Path, sessions: int, history: int, rounds: int) -> None:
    print(f"\npipeline-like load: {sessions} sessions with {history} stored turns each; per turn get_history (max 50)")
    print("then append_turn, every session once per round")
    sids = [f"bench:gm:{n}" for n in range(sessions)]
    async with HistoryStore(directory / "pipeline.sqlite3", max_turns=50) as store:
        await fill(store, sids, history)
        for concurrency in (64, sessions):
            queue = [sid for _ in range(rounds) for sid in sids]
            queue.reverse()

            async def worker(queue: list[str] = queue) -> None:
                while queue:
                    sid = queue.pop()
                    past = await store.get_history(sid)
                    await store.append_turn(sid, a_turn(len(past)))

            start = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            elapsed = time.perf_counter() - start
            turns = rounds * sessions
            rate = turns / elapsed
            print(f"  {concurrency:>6} turns in flight: {rate:>8.0f} turns/s ({turns} turns in {elapsed:.2f}s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--all-cores", action="store_true", help="do not pin the process to one CPU")
    parser.add_argument("--sizes", default="100,10000,100000", help="stored-turn counts to measure at")
    args = parser.parse_args()
    if not args.all_cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    print(f"CPUs used: {len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') else 'all'}")
    with tempfile.TemporaryDirectory(prefix="hookchat-bench-") as tmp:
        asyncio.run(flatness(Path(tmp), [int(s) for s in args.sizes.split(",")]))
        asyncio.run(pipeline(Path(tmp), sessions=10_000, history=10, rounds=3))


if __name__ == "__main__":
    main()
