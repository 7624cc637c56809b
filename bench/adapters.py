"""Messages per second and the latency each platform adapter adds, against the testing kit (`ChatHarness`, its
`RecordingAdapter`) in the same run: one function per adapter (`ADAPTERS`), each the same turns as the kit's.

Run: .venv/bin/python bench/adapters.py [telegram] [discord]
Target: each adapter at least 0.7x the kit's rate (the median of the per-round ratios), printed with met / not met.

- telegram: a small Bot API server in a separate process (getMe, getUpdates long polling, sendMessage,
  sendChatAction) injects private messages and times them until the bot's `sendMessage`; the adapter runs as in
  production (aiogram's HTTP client, long polling over loopback, the typing indicator).
- discord: dpytest's backend in the bot's own process (Discord's gateway cannot be run here): guild messages that
  mention the bot are made by dpytest and dispatched by discord.py; sends go to dpytest's fake HTTP. dpytest's own
  work (it inspects the caller's stack on every send) is charged to the bot's process.

All paths: the chat plugin (flushing every message at once) and the built-in tags, history on (SQLite), the same
scripted model. Each path runs ROUNDS times, alternating which goes first, each from a collected heap; the headline
ratio is the median of the per-round ratios.
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
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat
from core.config import HookchatConfig
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider

TURNS = 1_000
SESSIONS = 20
LATENCY_SAMPLES = 100
ROUNDS = 3
TARGET = 0.7
REPLY = "<msg><text>Hello there!</text></msg>"
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}

#: (rate in messages/s, latency per message in seconds, CPU seconds per message) of one run.
Result = tuple[float, list[float], float]


def _config(data_dir: str) -> HookchatConfig:
    return HookchatConfig.model_validate(
        {"data": {"dir": data_dir}, "plugins": {"dirs": [], "config": PLUGIN_CONFIG}, "adapters": {"console": False}}
    )


def _plugins() -> list[Path]:
    return [BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags"]


# -- the kit ---------------------------------------------------------------------------------------------------


async def through_the_kit(turns: int, samples: int) -> Result:
    """The same turns delivered straight to the app, answered into the kit's `RecordingAdapter`."""
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


# -- Telegram: a Bot API server in its own process ---------------------------------------------------------------

BOT_ID = 5000


def _bot_api_process(port_out: multiprocessing.Queue, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_bot_api(port_out))


async def _bot_api(port_out: multiprocessing.Queue) -> None:
    from aiohttp import web

    updates: deque[dict] = deque()
    arrived = asyncio.Event()
    sent: asyncio.Queue[float] = asyncio.Queue()
    counter = iter(range(1, 10**9))

    def ok(result: object) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    def update(user: int, text: str) -> None:
        n = next(counter)
        updates.append(
            {
                "update_id": n,
                "message": {
                    "message_id": n,
                    "date": int(time.time()),
                    "text": text,
                    "chat": {"id": user, "type": "private", "first_name": f"u{user}"},
                    "from": {"id": user, "is_bot": False, "first_name": f"u{user}"},
                },
            }
        )
        arrived.set()

    async def method(request: web.Request) -> web.Response:
        name = request.match_info["method"]
        form = await request.post()
        if name == "getUpdates":
            offset = int(form.get("offset") or 0)
            while updates and updates[0]["update_id"] < offset:
                updates.popleft()
            if not updates:
                arrived.clear()
                try:
                    await asyncio.wait_for(arrived.wait(), float(form.get("timeout") or 0))
                except TimeoutError:
                    pass
            return ok(list(updates)[:100])
        if name == "sendMessage":
            sent.put_nowait(time.perf_counter())
            return ok(
                {
                    "message_id": next(counter),
                    "date": int(time.time()),
                    "text": form.get("text", ""),
                    "chat": {"id": int(str(form["chat_id"])), "type": "private"},
                }
            )
        if name == "getMe":
            return ok({"id": BOT_ID, "is_bot": True, "first_name": "bench", "username": "bench_bot"})
        return ok(True)  # deleteWebhook, sendChatAction

    async def flood(request: web.Request) -> web.Response:
        count, sessions = int(request.query["count"]), int(request.query["sessions"])
        start = time.perf_counter()
        for n in range(count):
            update(20_000 + n % sessions, f"message {n}")
        for _ in range(count):
            await sent.get()
        return web.json_response({"rate": count / (time.perf_counter() - start)})

    async def latency(request: web.Request) -> web.Response:
        samples = []
        for n in range(int(request.query["count"])):
            start = time.perf_counter()
            update(30_000 + n, "one at a time")
            samples.append(await sent.get() - start)
        return web.json_response({"latency": samples})

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", method)
    app.router.add_get("/bench/flood", flood)
    app.router.add_get("/bench/latency", latency)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port_out.put(runner.addresses[0][1])
    await asyncio.Event().wait()


async def through_telegram(port: int, turns: int, samples: int) -> Result:
    """Updates from the Bot API server by long polling, answered with `sendMessage`."""
    import httpx

    from core.adapter.telegram import TelegramAdapter

    os.environ["BENCH_TELEGRAM_TOKEN"] = f"{BOT_ID}:bench-token"
    adapter = TelegramAdapter(
        "tg",
        token_env="BENCH_TELEGRAM_TOKEN",
        api_url=f"http://127.0.0.1:{port}",
        poll_timeout=10,
        download_media=False,
    )
    provider = ScriptedProvider([REPLY] * (turns + samples))
    with tempfile.TemporaryDirectory() as data_dir:
        async with HookChat(
            _config(data_dir), provider=provider, adapters=[adapter], entry_points=False, plugins=_plugins()
        ):
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=600) as control:
                cpu = time.process_time()
                rate = (await control.get("/bench/flood", params={"count": turns, "sessions": SESSIONS})).json()
                cpu = (time.process_time() - cpu) / turns
                latency = (await control.get("/bench/latency", params={"count": samples})).json()["latency"]
    return rate["rate"], latency, cpu


# -- Discord: dpytest's backend in this process ------------------------------------------------------------------


async def through_discord(turns: int, samples: int) -> Result:
    """Guild messages mentioning the bot, made by dpytest and dispatched by discord.py; sends to dpytest's HTTP."""
    import discord
    import discord.ext.test as dpytest
    from discord.ext.test import backend, callbacks

    from core.adapter.discord import INTENTS, DiscordAdapter

    class OnDpytest(DiscordAdapter):
        intents = INTENTS | discord.Intents(members=True)  # dpytest keeps its members in the member cache

        async def connect(self) -> None:
            await self.client._async_setup_hook()
            dpytest.configure(self.client, text_channels=SESSIONS, voice_channels=0, members=1)

        async def disconnect(self) -> None:
            pass

    os.environ["BENCH_DISCORD_TOKEN"] = "bench.discord.token"
    adapter = OnDpytest("dc", token_env="BENCH_DISCORD_TOKEN", typing=True)
    provider = ScriptedProvider([REPLY] * (turns + samples))
    sent: asyncio.Queue[float] = asyncio.Queue()

    async def on_send(message: discord.Message) -> None:
        sent.put_nowait(time.perf_counter())

    with tempfile.TemporaryDirectory() as data_dir:
        async with HookChat(
            _config(data_dir), provider=provider, adapters=[adapter], entry_points=False, plugins=_plugins()
        ):
            callbacks.set_callback(on_send, "send_message")
            config = dpytest.get_config()
            member, channels = config.members[0], config.channels
            mention = f"<@{adapter.client.user.id}> "
            start, cpu = time.perf_counter(), time.process_time()
            for n in range(turns):
                backend.make_message(mention + f"message {n}", member, channels[n % len(channels)])
                if n % 50 == 49:
                    await asyncio.sleep(0)  # let discord.py's dispatch tasks run, as a socket read would
            for _ in range(turns):
                await sent.get()
            rate = turns / (time.perf_counter() - start)
            cpu = (time.process_time() - cpu) / turns
            latency = []
            for n in range(samples):
                start = time.perf_counter()
                backend.make_message(mention + "one at a time", member, channels[n % len(channels)])
                latency.append(await sent.get() - start)
    return rate, latency, cpu


# -- the run -----------------------------------------------------------------------------------------------------


def _report(name: str, description: str, kit: list[Result], runs: list[Result]) -> None:
    per_round = [r[0] / k[0] for k, r in zip(kit, runs, strict=True)]
    ratio = statistics.median(per_round)
    kit_ms = statistics.median(statistics.median(r[1]) for r in kit) * 1e3
    run_ms = statistics.median(statistics.median(r[1]) for r in runs) * 1e3
    kit_cpu = statistics.median(r[2] for r in kit) * 1e6
    run_cpu = statistics.median(r[2] for r in runs) * 1e6
    print(
        f"{name} ({description}): {max(r[0] for r in runs):,.0f} messages/s (best run; median "
        f"{statistics.median(r[0] for r in runs):,.0f}); kit {max(k[0] for k in kit):,.0f}"
    )
    print(
        f"  {name} / kit: {ratio:.2f}x, the median of the rounds ({', '.join(f'{r:.2f}x' for r in per_round)}); "
        f"target at least {TARGET:.2f}x: {'met' if ratio >= TARGET else 'NOT met'}"
    )
    print(
        f"  latency per message, one at a time (median): kit {kit_ms:.2f} ms, {name} {run_ms:.2f} ms; the adapter "
        f"adds {run_ms - kit_ms:.2f} ms; CPU per message kit {kit_cpu:,.0f} us, {name} {run_cpu:,.0f} us"
    )


async def main(names: list[str]) -> None:
    logging.disable(logging.WARNING)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})
    ports: multiprocessing.Queue = multiprocessing.Queue()
    bot_api = multiprocessing.Process(
        target=_bot_api_process, args=(ports, cpus[-1] if len(cpus) > 1 else None), daemon=True
    )
    bot_api.start()
    try:
        port = await asyncio.to_thread(ports.get, True, 30)
        adapters: dict[str, tuple[str, Callable[[int, int], Awaitable[Result]]]] = {
            "telegram": (
                "long polling a Bot API server in another process over loopback",
                lambda turns, samples: through_telegram(port, turns, samples),
            ),
            "discord": ("dpytest's backend in the bot's process", through_discord),
        }
        chosen = [n for n in names if n in adapters] or list(adapters)
        await through_the_kit(200, 10)  # warm-up: imports, first database, parser caches
        for name in chosen:
            await adapters[name][1](200, 10)
        kit: list[Result] = []
        runs: dict[str, list[Result]] = {name: [] for name in chosen}
        for n in range(ROUNDS):
            order = ["kit", *chosen] if n % 2 == 0 else [*reversed(chosen), "kit"]
            for which in order:
                gc.collect()
                if which == "kit":
                    kit.append(await through_the_kit(TURNS, LATENCY_SAMPLES))
                else:
                    runs[which].append(await adapters[which][1](TURNS, LATENCY_SAMPLES))
    finally:
        bot_api.terminate()
        bot_api.join()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"{TURNS:,} turns over {SESSIONS} sessions, chat + builtin_tags plugins, history on, bot pinned to one core; "
        f"{ROUNDS} rounds; load average at the end {load} on {len(cpus)} cores"
    )
    print(
        f"testing kit (RecordingAdapter): {max(k[0] for k in kit):,.0f} messages/s (best run; median "
        f"{statistics.median(k[0] for k in kit):,.0f})"
    )
    for name in chosen:
        _report(name, adapters[name][0], kit, runs[name])


ADAPTERS = ("telegram", "discord")  # the adapters main() knows; one `through_<name>` function each

if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
