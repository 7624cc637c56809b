"""Messages per second from an injected OneBot event to the bot's `send_msg`, through a loopback WebSocket, against
the same turns through the testing kit (`ChatHarness`) in the same run; and the latency the adapter adds per message.

Run: .venv/bin/python bench/onebot.py
The OneBot implementation is a small peer in a separate process (as NapCat is), so its own JSON and socket work is
not charged to the bot; it injects the events and times them by the monotonic clock, which both processes share.
Both paths run the same plugins (chat, flushing every message at once, and the built-in tags), history on (SQLite),
the same scripted model. Target: the OneBot path at least 0.7x the kit's rate.

Made robust for a shared machine (other processes take the same core at random moments, which only ever slows a
run down): each path runs ROUNDS times, the two paths alternating and swapping which goes first every round (so
neither is always the one that follows the other's heap and caches), each run starting from a collected heap (so
neither pays the garbage collector for the other's garbage). The headline ratio is the median of the per-round
ratios (a round's two runs are next to each other in time, and one disturbed round does not move the median); each
path's best run, the least disturbed, is compared too.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.server import serve

from core.adapter.onebot import OneBotAdapter
from core.app import HookChat
from core.config import HookchatConfig
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider

TURNS = 3_000
SESSIONS = 100
LATENCY_SAMPLES = 200
ROUNDS = 5  # the two paths alternate, first one then the other leading; see the docstring
REPLY = "<msg><text>Hello there!</text></msg>"
BOT_ID = 10001
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}


# -- the OneBot implementation (its own process) ------------------------------------------------------------------


def _event(user: int, text: str, message_id: int) -> str:
    return json.dumps(
        {
            "post_type": "message",
            "message_type": "private",
            "sub_type": "friend",
            "message_id": message_id,
            "user_id": user,
            "message": [{"type": "text", "data": {"text": text}}],
            "raw_message": text,
            "font": 0,
            "sender": {"user_id": user, "nickname": f"u{user}"},
            "time": int(time.time()),
            "self_id": BOT_ID,
        }
    )


async def _peer(port_out: multiprocessing.Queue) -> None:
    async def connection(ws):
        sent = asyncio.Queue()
        results: dict[str, object] = {}

        async def flood(count: int, sessions: int) -> None:
            start = time.perf_counter()
            for n in range(count):
                await ws.send(_event(20_000 + n % sessions, f"message {n}", n + 1))
            for _ in range(count):
                await sent.get()
            results["rate"] = count / (time.perf_counter() - start)

        async def latency(count: int) -> None:
            samples = []
            for n in range(count):
                start = time.perf_counter()
                await ws.send(_event(30_000 + n, "one at a time", 100_000 + n))
                await sent.get()
                samples.append(time.perf_counter() - start)
            results["latency"] = samples

        async def answer(call: dict, data: object) -> None:
            await ws.send(json.dumps({"status": "ok", "retcode": 0, "data": data, "echo": call["echo"]}))

        jobs = set()
        await ws.send(
            json.dumps(
                {
                    "post_type": "meta_event",
                    "meta_event_type": "lifecycle",
                    "sub_type": "connect",
                    "time": int(time.time()),
                    "self_id": BOT_ID,
                }
            )
        )
        message_ids = iter(range(1_000_000, 10_000_000))
        async for frame in ws:
            call = json.loads(frame)
            action, params = call["action"], call["params"]
            if action == "send_msg":
                sent.put_nowait(None)
                await answer(call, {"message_id": next(message_ids)})
            elif action == "bench_flood":
                jobs.add(asyncio.create_task(flood(params["count"], params["sessions"])))
                await answer(call, None)
            elif action == "bench_latency":
                jobs.add(asyncio.create_task(latency(params["count"])))
                await answer(call, None)
            elif action == "bench_result":  # answered when the running job ends; the reading goes on meanwhile
                pending = list(jobs)
                jobs.clear()

                async def report(call=call, pending=pending):
                    await asyncio.gather(*pending)
                    await answer(call, dict(results))

                jobs.add(asyncio.create_task(report()))
            else:
                await answer(call, {"user_id": BOT_ID, "nickname": "bench"})

    async with serve(connection, "127.0.0.1", 0, compression=None, max_size=None) as server:
        port_out.put(server.sockets[0].getsockname()[1])
        await server.serve_forever()


def _peer_process(port_out: multiprocessing.Queue, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_peer(port_out))


# -- the two paths ----------------------------------------------------------------------------------------------


def _config(data_dir: str) -> HookchatConfig:
    return HookchatConfig.model_validate(
        {"data": {"dir": data_dir}, "plugins": {"dirs": [], "config": PLUGIN_CONFIG}, "adapters": {"console": False}}
    )


async def through_onebot(port: int, turns: int, samples: int) -> tuple[float, list[float], float]:
    adapter = OneBotAdapter("qq", url=f"ws://127.0.0.1:{port}", action_timeout=600, max_queued_events=turns)
    provider = ScriptedProvider([REPLY] * (turns + samples))
    with tempfile.TemporaryDirectory() as data_dir:
        async with HookChat(
            _config(data_dir),
            provider=provider,
            adapters=[adapter],
            entry_points=False,
            plugins=[BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags"],
        ):
            await asyncio.wait_for(adapter.wait_connected(), 30)
            cpu = time.process_time()
            await adapter.call_action("bench_flood", count=turns, sessions=SESSIONS)
            rate = (await adapter.call_action("bench_result"))["rate"]
            cpu = (time.process_time() - cpu) / turns
            await adapter.call_action("bench_latency", count=samples)
            latency = (await adapter.call_action("bench_result"))["latency"]
            assert adapter.stats().dropped_events == 0
    return rate, latency, cpu


async def through_the_kit(turns: int, samples: int) -> tuple[float, list[float], float]:
    provider = ScriptedProvider([REPLY] * (turns + samples))
    async with ChatHarness(provider=provider, config={"plugins": {"config": PLUGIN_CONFIG}}) as bot:
        app = bot.app
        messages = [bot.message(f"message {n}", user_id=str(20_000 + n % SESSIONS)) for n in range(turns)]
        start, cpu = time.perf_counter(), time.process_time()
        turns_done = [(await app.receive(m)).turn for m in messages]
        await asyncio.gather(*turns_done)
        rate = turns / (time.perf_counter() - start)
        cpu = (time.process_time() - cpu) / turns
        latency = []
        for n in range(samples):
            message = bot.message("one at a time", user_id=str(30_000 + n))
            start = time.perf_counter()
            await (await app.receive(message)).turn
            latency.append(time.perf_counter() - start)
        assert len(bot.adapter.sent) == turns + samples
    return rate, latency, cpu


async def main() -> None:
    logging.disable(logging.WARNING)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})
    ports: multiprocessing.Queue = multiprocessing.Queue()
    peer = multiprocessing.Process(target=_peer_process, args=(ports, cpus[-1] if len(cpus) > 1 else None), daemon=True)
    peer.start()
    try:
        port = await asyncio.to_thread(ports.get, True, 30)
        await through_the_kit(500, 20)  # warm-up: imports, first database, parser caches
        await through_onebot(port, 500, 20)
        kit, onebot = [], []

        async def run_kit() -> None:
            gc.collect()
            kit.append(await through_the_kit(TURNS, LATENCY_SAMPLES))

        async def run_onebot() -> None:
            gc.collect()
            onebot.append(await through_onebot(port, TURNS, LATENCY_SAMPLES))

        for n in range(ROUNDS):
            for run in (run_kit, run_onebot) if n % 2 == 0 else (run_onebot, run_kit):
                await run()
    finally:
        peer.terminate()
        peer.join()
    kit_rate, onebot_rate = max(r[0] for r in kit), max(r[0] for r in onebot)
    per_round = [o[0] / k[0] for k, o in zip(kit, onebot, strict=True)]
    kit_ms = statistics.median(statistics.median(r[1]) for r in kit) * 1e3
    onebot_ms = statistics.median(statistics.median(r[1]) for r in onebot) * 1e3
    kit_cpu = statistics.median(r[2] for r in kit) * 1e6
    onebot_cpu = statistics.median(r[2] for r in onebot) * 1e6
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"{TURNS:,} turns over {SESSIONS} sessions, chat + builtin_tags plugins, history on, bot pinned to one core;"
        f" {ROUNDS} rounds, alternating which path goes first; load average at the end {load} on {len(cpus)} cores"
    )
    print(
        f"testing kit (RecordingAdapter): {kit_rate:,.0f} messages/s (best run; median "
        f"{statistics.median(r[0] for r in kit):,.0f})"
    )
    print(
        f"OneBot, event -> send_msg over a loopback WebSocket: {onebot_rate:,.0f} messages/s (best run; median "
        f"{statistics.median(r[0] for r in onebot):,.0f})"
    )
    print(
        f"OneBot / kit: {statistics.median(per_round):.2f}x, the median of the rounds (target at least 0.70x); "
        f"per round {', '.join(f'{r:.2f}x' for r in per_round)}; best against best {onebot_rate / kit_rate:.2f}x"
    )
    print(
        f"CPU of the bot's process per message (median): kit {kit_cpu:,.0f} us, OneBot {onebot_cpu:,.0f} us "
        f"(the adapter, JSON and WebSocket add {onebot_cpu - kit_cpu:,.0f} us)"
    )
    print(
        f"latency per message, one at a time (median of {LATENCY_SAMPLES} per round): kit {kit_ms:.2f} ms, "
        f"OneBot {onebot_ms:.2f} ms; the adapter adds {onebot_ms - kit_ms:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main())
