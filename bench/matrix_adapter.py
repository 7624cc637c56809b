"""Messages per second through each platform adapter, and the latency it adds per message, against the same turns
through the testing kit (`ChatHarness`, whose `RecordingAdapter` is the fake adapter) in the same run.

Run: .venv/bin/python bench/matrix_adapter.py   (bench/adapters.py has Telegram and Discord)
Each adapter talks to a small fake of its platform's server in a separate process (so the server's own work is
not charged to the bot); the fake injects the messages and times them to the bot's reply by the monotonic clock,
which both processes share. Both paths run the same plugins (chat, flushing every message at once, and the
built-in tags), history on, the same scripted model. Target: each adapter at least 0.7x the kit's rate.

Robust on a shared machine: each path runs ROUNDS times, alternating which goes first, each from a collected heap;
the headline ratio is the median of the per-round ratios.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat
from core.config import HookchatConfig
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider

TURNS = 2_000
SESSIONS = 100
LATENCY_SAMPLES = 100
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
REPLY = "<msg><text>Hello there!</text></msg>"
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}
TARGET = 0.7


def _config(data_dir: str) -> HookchatConfig:
    return HookchatConfig.model_validate(
        {"data": {"dir": data_dir}, "plugins": {"dirs": [], "config": PLUGIN_CONFIG}, "adapters": {"console": False}}
    )


async def through_the_kit(turns: int, samples: int) -> tuple[float, list[float]]:
    """The testing kit's rate (messages/s, `SESSIONS` sessions) and per-message latencies, one at a time."""
    provider = ScriptedProvider([REPLY] * (turns + samples))
    async with ChatHarness(provider=provider, config={"plugins": {"config": PLUGIN_CONFIG}}) as bot:
        app = bot.app
        messages = [bot.message(f"message {n}", user_id=str(20_000 + n % SESSIONS)) for n in range(turns)]
        start = time.perf_counter()
        turns_done = [(await app.receive(m)).turn for m in messages]
        await asyncio.gather(*turns_done)
        rate = turns / (time.perf_counter() - start)
        latency = []
        for n in range(samples):
            message = bot.message("one at a time", user_id=str(30_000 + n))
            start = time.perf_counter()
            await (await app.receive(message)).turn
            latency.append(time.perf_counter() - start)
        assert len(bot.adapter.sent) == turns + samples
    return rate, latency


def _report(label: str, kit: list[tuple[float, list[float]]], other: list[tuple[float, list[float]]]) -> bool:
    per_round = [o[0] / k[0] for k, o in zip(kit, other, strict=True)]
    ratio = statistics.median(per_round)
    kit_ms = statistics.median(statistics.median(r[1]) for r in kit) * 1e3
    other_ms = statistics.median(statistics.median(r[1]) for r in other) * 1e3
    met = ratio >= TARGET
    print(
        f"{label}: {statistics.median(r[0] for r in other):,.0f} messages/s against the kit's "
        f"{statistics.median(r[0] for r in kit):,.0f} (medians of {len(kit)} rounds); {label} / kit "
        f"{ratio:.2f}x (per round {', '.join(f'{r:.2f}x' for r in per_round)}); target at least {TARGET:.2f}x: "
        f"{'met' if met else 'NOT met'}"
    )
    print(
        f"{label}: latency per message, one at a time (median): kit {kit_ms:.2f} ms, {label} {other_ms:.2f} ms; "
        f"the adapter adds {other_ms - kit_ms:.2f} ms"
    )
    return met


async def _alternate(kit_run, other_run) -> tuple[list, list]:
    kit, other = [], []

    async def run_kit() -> None:
        gc.collect()
        kit.append(await kit_run())

    async def run_other() -> None:
        gc.collect()
        other.append(await other_run())

    for n in range(ROUNDS):
        for run in (run_kit, run_other) if n % 2 == 0 else (run_other, run_kit):
            await run()
    return kit, other


# -- Matrix: a fake homeserver (its own process) ------------------------------------------------------------------

MATRIX_BOT = "@bench:localhost"


def _matrix_room(n: int) -> str:
    return f"!room{n}:localhost"


def _matrix_user(n: int) -> str:
    return f"@u{n}:localhost"


async def _fake_homeserver(port_out: multiprocessing.Queue) -> None:
    """The client-server API as far as the adapter uses it with an access token: whoami, displayname, /sync (long
    poll over an in-memory queue of events) and PUT send; plus /bench/* to start a flood or a latency run."""
    from aiohttp import web

    pending: list[tuple[str, dict]] = []
    arrived = asyncio.Event()
    sent: asyncio.Queue[None] = asyncio.Queue()
    results: dict[str, object] = {}
    jobs: set[asyncio.Task] = set()
    counter = iter(range(10**9))
    rooms = [_matrix_room(n) for n in range(SESSIONS)] + [_matrix_room(30_000 + n) for n in range(LATENCY_SAMPLES)]

    def state_of(room: str) -> list[dict]:
        user = "@u" + room[5:].split(":")[0] + ":localhost"
        return [
            {
                "type": "m.room.create",
                "state_key": "",
                "sender": user,
                "event_id": f"$c{room}",
                "origin_server_ts": 1,
                "content": {"creator": user, "room_version": "10"},
            }
        ] + [
            {
                "type": "m.room.member",
                "state_key": who,
                "sender": who,
                "event_id": f"$m{who}{room}",
                "origin_server_ts": 1,
                "content": {"membership": "join", "displayname": who[1:].split(":")[0]},
            }
            for who in (user, MATRIX_BOT)
        ]

    def inject(room: str, text: str) -> None:
        n = next(counter)
        pending.append(
            (
                room,
                {
                    "type": "m.room.message",
                    "event_id": f"$e{n}",
                    "sender": "@u" + room[5:].split(":")[0] + ":localhost",
                    "origin_server_ts": int(time.time() * 1000),
                    "content": {"msgtype": "m.text", "body": text},
                },
            )
        )
        arrived.set()

    generation = 0  # one per bot run: a long poll of a stopped bot still waiting here must not take the events

    async def sync(request: web.Request) -> web.Response:
        nonlocal generation
        since = request.query.get("since")
        if since is None:
            generation += 1
            join = {
                room: {"state": {"events": state_of(room)}, "timeline": {"events": [], "limited": False}}
                for room in rooms
            }
            return web.json_response({"next_batch": "s0", "rooms": {"join": join}})
        mine = generation
        if not pending:
            arrived.clear()
            try:
                await asyncio.wait_for(arrived.wait(), int(request.query.get("timeout", "0")) / 1000)
            except TimeoutError:
                pass
        if mine != generation:
            return web.json_response({"next_batch": since, "rooms": {}})
        batch = pending[:]
        pending.clear()
        join: dict[str, dict] = {}
        for room, event in batch:
            join.setdefault(room, {"timeline": {"events": [], "limited": False}})["timeline"]["events"].append(event)
        return web.json_response({"next_batch": f"s{next(counter)}", "rooms": {"join": join}})

    async def send(request: web.Request) -> web.Response:
        await request.read()
        sent.put_nowait(None)
        return web.json_response({"event_id": f"$out{next(counter)}"})

    async def flood(count: int, sessions: int) -> None:
        start = time.perf_counter()
        for n in range(count):
            inject(_matrix_room(n % sessions), f"message {n}")
        for _ in range(count):
            await sent.get()
        results["rate"] = count / (time.perf_counter() - start)

    async def latency(count: int) -> None:
        samples = []
        for n in range(count):
            start = time.perf_counter()
            inject(_matrix_room(30_000 + n), "one at a time")
            await sent.get()
            samples.append(time.perf_counter() - start)
        results["latency"] = samples

    async def control(request: web.Request) -> web.Response:
        what = request.match_info["what"]
        if what == "result":
            await asyncio.gather(*jobs)
            jobs.clear()
            return web.json_response(results)
        params = await request.json()
        jobs.add(asyncio.create_task(flood(params["count"], SESSIONS) if what == "flood" else latency(params["count"])))
        return web.json_response({})

    app = web.Application()
    app.router.add_get(
        "/_matrix/client/v3/account/whoami", lambda r: web.json_response({"user_id": MATRIX_BOT, "device_id": "BENCH"})
    )
    app.router.add_get(
        "/_matrix/client/v3/profile/{user}/displayname", lambda r: web.json_response({"displayname": "bench"})
    )
    app.router.add_get("/_matrix/client/v3/sync", sync)
    app.router.add_put("/_matrix/client/v3/rooms/{room}/send/{type}/{txn}", send)
    app.router.add_post("/bench/{what}", control)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port_out.put(site._server.sockets[0].getsockname()[1])
    await asyncio.Event().wait()


def _homeserver_process(port_out: multiprocessing.Queue, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_fake_homeserver(port_out))


async def through_matrix(url: str, turns: int, samples: int) -> tuple[float, list[float]]:
    """The Matrix adapter's rate and latencies against the fake homeserver at `url`."""
    import httpx

    from core.adapter.matrix import MatrixAdapter

    os.environ["HOOKCHAT_BENCH_MATRIX_TOKEN"] = "bench-token"
    adapter = MatrixAdapter(
        "mx",
        homeserver=url,
        user_id=MATRIX_BOT,
        access_token_env="HOOKCHAT_BENCH_MATRIX_TOKEN",
        sync_timeout=5,
        max_queued_events=turns,
    )
    provider = ScriptedProvider([REPLY] * (turns + samples))
    with tempfile.TemporaryDirectory() as data_dir:
        async with (
            HookChat(
                _config(data_dir),
                provider=provider,
                adapters=[adapter],
                entry_points=False,
                plugins=[BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags"],
            ),
            httpx.AsyncClient(base_url=url, timeout=600, trust_env=False) as control,
        ):
            await asyncio.wait_for(adapter.wait_until(lambda s: s.syncs >= 1 and s.queued_events == 0), 30)
            await control.post("/bench/flood", json={"count": turns})
            rate = (await control.post("/bench/result", json={})).json()["rate"]
            await control.post("/bench/latency", json={"count": samples})
            latency = (await control.post("/bench/result", json={})).json()["latency"]
    return rate, latency


async def bench_matrix() -> bool:
    """The Matrix line: the adapter against a fake homeserver, and the kit, alternating; True when the target is
    met."""
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    ports: multiprocessing.Queue = multiprocessing.Queue()
    server = multiprocessing.Process(
        target=_homeserver_process, args=(ports, cpus[-1] if len(cpus) > 1 else None), daemon=True
    )
    server.start()
    try:
        url = f"http://127.0.0.1:{await asyncio.to_thread(ports.get, True, 30)}"
        await through_the_kit(300, 10)  # warm-up: imports, first database, parser caches
        await through_matrix(url, 300, 10)
        kit, matrix = await _alternate(
            lambda: through_the_kit(TURNS, LATENCY_SAMPLES), lambda: through_matrix(url, TURNS, LATENCY_SAMPLES)
        )
    finally:
        server.terminate()
        server.join()
    print("Matrix: event in a /sync response -> PUT send, through matrix-nio, against a fake homeserver over loopback")
    return _report("Matrix", kit, matrix)


BENCHES = {"matrix": bench_matrix}


async def main(names: list[str]) -> None:
    logging.disable(logging.WARNING)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})  # the bot on one core, the fake servers on another
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"{TURNS:,} turns over {SESSIONS} sessions per run, chat + builtin_tags plugins, history on, bot pinned to "
        f"one core; {ROUNDS} rounds alternating which path goes first; load average at the start {load} on "
        f"{len(cpus)} cores"
    )
    for name in names or list(BENCHES):
        await BENCHES[name]()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
