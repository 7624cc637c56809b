"""Messages per second and the latency each platform adapter adds, against the testing kit (`ChatHarness`, its
`RecordingAdapter`) in the same run.

Run: nice .venv/bin/python bench/adapters.py [--adapter telegram --adapter matrix ...] [--rounds N]
Target: each adapter at least 0.7x the kit's rate (the median of the per-pair ratios), printed with met / not met.

The workload is the same on every path: SESSIONS conversations at once, each person writing their next message when
the bot has answered the last (so every message is its own turn: nothing waits to be joined into a batch), TURNS
messages in all; then LATENCY_SAMPLES messages one at a time, each in a new chat, timed to the bot's answer. (Not a
flood: messages that reach a session while its turn runs wait and are joined into one batch, so a flood would
measure how many get joined, which depends on each path's timing, rather than what each message costs.)

- kit: the messages go straight to `app.receive`; the answer is the `RecordingAdapter`'s send.
- telegram: a Bot API server (getMe, getUpdates long polling, sendMessage, sendChatAction) in another process
  injects private messages and times them to the bot's `sendMessage`; the adapter runs as in production (aiogram's
  HTTP client, long polling over loopback, the typing indicator).
- matrix: a homeserver (whoami, displayname, /sync long polling, PUT send) in the same other process, one room of
  two members per chat; event in a /sync answer -> PUT send, through the adapter's HTTP client.
- discord: dpytest's backend in the bot's own process (Discord's gateway cannot be run here): each guild message
  that mentions the bot is a gateway MESSAGE_CREATE payload (a copy, with its own id and text, of one dpytest's
  factories made per chat) handed to discord.py's parser, as the gateway hands it an event; sends go to dpytest's
  fake HTTP, which makes the sent message's payload and parses it back as the gateway's echo of the bot's own
  message. That fake HTTP's own work (payloads, a stack inspection per send: about 0.1 ms per message) is charged
  to the bot's process, but no HTTP request is made and no gateway event decoded, which a real bot pays (a request
  costs about 0.3 ms of CPU here, see the Telegram path): this path measures discord.py and the adapter, with less
  transport than the others. (The person's messages used to be made by dpytest's `make_message`, which
  builds every payload anew and keeps each in its message store; that work and memory were charged to the bot.)

All paths: the chat plugin (flushing every message at once) and the built-in tags, history on (SQLite), the same
model (`EchoProvider`, which keeps no requests: `ScriptedProvider` kept a copy of every request, so the heap the
collector walks grew through each run), the bot pinned to one core and the peer process to the other. Every bot's
heap is frozen once it has started, as `hookchat run` freezes it (`core/utils/heap.py`), and unfrozen after its run,
so each path is measured in the heap state of the real path and starts from the same one. Each adapter runs
`--rounds` times, each time next to a kit run of its own (which goes first every other time), from a collected heap;
the headline ratio is the median of those pairs' ratios, printed with their range, beside the CPU of the bot's
process per message (its collector's share, and the full collections) of each side: on a shared machine the wall
rates move with the load, and the CPU per message says which side paid for what.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import logging
import multiprocessing
import os
import statistics
import sys
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat
from core.chat import KiraIMSentResult, MessageChain, Session
from core.config import HookchatConfig
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, EchoProvider
from core.utils.heap import freeze_started, thaw

TURNS = 1_000
SESSIONS = 20
LATENCY_SAMPLES = 100
TARGET = 0.7
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}
FIRST_CHAT = 20_000  # conversation n is chat FIRST_CHAT + n
FIRST_SAMPLE = 30_000  # latency sample n is chat FIRST_SAMPLE + n


@dataclass
class Result:
    """One run of one path: its rate, the latencies one at a time, and what the bot's process paid per message of
    the conversations (CPU, and the garbage collector's share of it)."""

    rate: float  # messages/s
    latency: list[float]  # seconds, one per sample
    cpu: float  # CPU seconds of the bot's process per message
    gc: float = 0.0  # wall seconds in the garbage collector per message (a preempted collection counts)
    full_collections: int = 0  # of the oldest generation, during the conversations


class _Collections:
    """The garbage collector's time and full collections while it is open (`gc.callbacks`)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.full = 0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.full += info["generation"] == 2

    def __enter__(self) -> _Collections:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc_info: object) -> None:
        gc.callbacks.remove(self._callback)


async def _measured(run: Callable[[], Awaitable[float]], turns: int) -> tuple[float, float, float, int]:
    """`run()` (the conversations; it returns the rate), with what the process paid for them: (rate, CPU per message,
    seconds in the collector per message, full collections)."""
    with _Collections() as collections:
        cpu = time.process_time()
        rate = await run()
        cpu = (time.process_time() - cpu) / turns
    return rate, cpu, collections.seconds / turns, collections.full


#: Writes a message into chat number `chat` (the person's side of a platform).
Inject = Callable[[int, str], None]


# -- the person's side, the same on every path ------------------------------------------------------------------


async def converse(inject: Inject, answered: asyncio.Queue[int], turns: int, sessions: int) -> float:
    """`turns` messages in `sessions` conversations at once, each writing its next message once the bot has answered
    the last (`answered` yields the chat of each answer); the rate in messages/s."""
    left = {FIRST_CHAT + n: turns // sessions + (n < turns % sessions) for n in range(sessions)}
    start = time.perf_counter()
    for chat in left:
        left[chat] -= 1
        inject(chat, "message 0")
    for _ in range(turns):
        chat = await answered.get()
        if left.get(chat):
            left[chat] -= 1
            inject(chat, f"message {turns - left[chat]}")
    return turns / (time.perf_counter() - start)


async def one_at_a_time(inject: Inject, answered: asyncio.Queue[int], samples: int) -> list[float]:
    """The time from a message to its answer, `samples` times, each in a chat of its own."""
    latency = []
    for n in range(samples):
        start = time.perf_counter()
        inject(FIRST_SAMPLE + n, "one at a time")
        await answered.get()
        latency.append(time.perf_counter() - start)
    return latency


def _config(data_dir: str) -> HookchatConfig:
    return HookchatConfig.model_validate(
        {"data": {"dir": data_dir}, "plugins": {"dirs": [], "config": PLUGIN_CONFIG}, "adapters": {"console": False}}
    )


@asynccontextmanager
async def _bot(adapter: Any) -> AsyncIterator[HookChat]:
    """hookchat with `adapter`, the bench's plugins and the model (`EchoProvider`)."""
    provider = EchoProvider()
    plugins = [BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags"]
    with tempfile.TemporaryDirectory() as data_dir:
        async with (
            HookChat(
                _config(data_dir), provider=provider, adapters=[adapter], entry_points=False, plugins=plugins
            ) as app,
            _frozen(),
        ):
            yield app


@asynccontextmanager
async def _frozen() -> AsyncIterator[None]:
    """The started bot's heap frozen, as `hookchat run` freezes it once the bot is up (`core/utils/heap.py`);
    unfrozen after the run, so every path starts from the same heap."""
    freeze_started()
    try:
        yield
    finally:
        thaw()


# -- the kit ---------------------------------------------------------------------------------------------------


async def through_the_kit(turns: int, samples: int) -> Result:
    """The messages delivered straight to the app, answered into the kit's `RecordingAdapter`."""
    provider = EchoProvider()
    answered: asyncio.Queue[int] = asyncio.Queue()
    harness = ChatHarness(provider=provider, config={"plugins": {"config": PLUGIN_CONFIG}})
    async with harness as bot, _frozen():
        recording = bot.adapter.send
        tasks: set[asyncio.Task[Any]] = set()

        async def send(session: Session, chain: MessageChain) -> KiraIMSentResult:
            result = await recording(session, chain)
            answered.put_nowait(int(session.session_id))  # the answer is its send, as on the platforms' paths
            return result

        def inject(chat: int, text: str) -> None:
            task = asyncio.create_task(bot.app.receive(bot.message(text, user_id=str(chat))))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        bot.adapter.send = send  # type: ignore[method-assign] - the bench times the kit at its send
        rate, cpu, in_gc, full = await _measured(lambda: converse(inject, answered, turns, SESSIONS), turns)
        latency = await one_at_a_time(inject, answered, samples)
        assert len(bot.adapter.sent) == turns + samples
    return Result(rate, latency, cpu, in_gc, full)


# -- the peer process: a Telegram Bot API server and a Matrix homeserver --------------------------------------------

TELEGRAM_BOT_ID = 5000
MATRIX_BOT = "@bench:localhost"


def _matrix_room(chat: int) -> str:
    return f"!room{chat}:localhost"


def _matrix_user(chat: int) -> str:
    return f"@u{chat}:localhost"


def _peer_process(port_out: multiprocessing.Queue, cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})
    asyncio.run(_peer(port_out))


async def _peer(port_out: multiprocessing.Queue) -> None:
    """The platforms' servers as far as the adapters use them, and /bench/{platform}/{converse,latency}?turns=...,
    which play the people's side and answer with the rate or the latencies."""
    from aiohttp import web

    answered: dict[str, asyncio.Queue[int]] = {"telegram": asyncio.Queue(), "matrix": asyncio.Queue()}
    counter = iter(range(1, 10**9))

    # Telegram: updates wait in a deque for getUpdates; sendMessage is an answer.
    updates: deque[dict] = deque()
    update_arrived = asyncio.Event()

    def telegram_inject(chat: int, text: str) -> None:
        n = next(counter)
        person = {"id": chat, "is_bot": False, "first_name": f"u{chat}"}
        message = {
            "message_id": n,
            "date": int(time.time()),
            "text": text,
            "chat": {"id": chat, "type": "private", "first_name": f"u{chat}"},
            "from": person,
        }
        updates.append({"update_id": n, "message": message})
        update_arrived.set()

    def ok(result: object) -> web.Response:
        return web.json_response({"ok": True, "result": result})

    async def telegram(request: web.Request) -> web.Response:
        name = request.match_info["method"]
        form = await request.json() if request.content_type == "application/json" else await request.post()
        if name == "getUpdates":
            offset = int(form.get("offset") or 0)
            while updates and updates[0]["update_id"] < offset:
                updates.popleft()
            if not updates:
                update_arrived.clear()
                try:
                    await asyncio.wait_for(update_arrived.wait(), float(form.get("timeout") or 0))
                except TimeoutError:
                    pass
            return ok(list(updates)[:100])
        if name == "sendMessage":
            chat = int(str(form["chat_id"]))
            answered["telegram"].put_nowait(chat)
            return ok(
                {
                    "message_id": next(counter),
                    "date": int(time.time()),
                    "text": form.get("text", ""),
                    "chat": {"id": chat, "type": "private"},
                }
            )
        if name == "getMe":
            return ok({"id": TELEGRAM_BOT_ID, "is_bot": True, "first_name": "bench", "username": "bench_bot"})
        return ok(True)  # deleteWebhook, sendChatAction

    # Matrix: events wait in a list for /sync; PUT send is an answer.
    events: list[tuple[str, dict]] = []
    event_arrived = asyncio.Event()
    chats = [FIRST_CHAT + n for n in range(SESSIONS)] + [FIRST_SAMPLE + n for n in range(LATENCY_SAMPLES)]
    generation = 0  # one per bot run: a long poll of a stopped bot still waiting here must not take the events

    def room_state(chat: int) -> list[dict]:
        person, room = _matrix_user(chat), _matrix_room(chat)
        create = {
            "type": "m.room.create",
            "state_key": "",
            "sender": person,
            "event_id": f"$c{room}",
            "origin_server_ts": 1,
            "content": {"creator": person, "room_version": "10"},
        }
        members = [
            {
                "type": "m.room.member",
                "state_key": who,
                "sender": who,
                "event_id": f"$m{who}{room}",
                "origin_server_ts": 1,
                "content": {"membership": "join", "displayname": who[1:].split(":")[0]},
            }
            for who in (person, MATRIX_BOT)
        ]
        return [create, *members]

    def matrix_inject(chat: int, text: str) -> None:
        event = {
            "type": "m.room.message",
            "event_id": f"$e{next(counter)}",
            "sender": _matrix_user(chat),
            "origin_server_ts": int(time.time() * 1000),
            "content": {"msgtype": "m.text", "body": text},
        }
        events.append((_matrix_room(chat), event))
        event_arrived.set()

    async def sync(request: web.Request) -> web.Response:
        nonlocal generation
        since = request.query.get("since")
        if since is None:
            generation += 1
            join = {
                _matrix_room(chat): {
                    "state": {"events": room_state(chat)},
                    "timeline": {"events": [], "limited": False},
                }
                for chat in chats
            }
            return web.json_response({"next_batch": "s0", "rooms": {"join": join}})
        mine = generation
        if not events:
            event_arrived.clear()
            try:
                await asyncio.wait_for(event_arrived.wait(), int(request.query.get("timeout", "0")) / 1000)
            except TimeoutError:
                pass
        if mine != generation:
            return web.json_response({"next_batch": since, "rooms": {}})
        batch = events[:]
        events.clear()
        join: dict[str, dict] = {}
        for room, event in batch:
            join.setdefault(room, {"timeline": {"events": [], "limited": False}})["timeline"]["events"].append(event)
        return web.json_response({"next_batch": f"s{next(counter)}", "rooms": {"join": join}})

    async def matrix_send(request: web.Request) -> web.Response:
        await request.read()
        answered["matrix"].put_nowait(int(request.match_info["room"].removeprefix("!room").split(":")[0]))
        return web.json_response({"event_id": f"$out{next(counter)}"})

    injects: dict[str, Inject] = {"telegram": telegram_inject, "matrix": matrix_inject}

    async def control(request: web.Request) -> web.Response:
        platform, what, turns = request.match_info["platform"], request.match_info["what"], int(request.query["turns"])
        if what == "converse":
            return web.json_response(await converse(injects[platform], answered[platform], turns, SESSIONS))
        return web.json_response(await one_at_a_time(injects[platform], answered[platform], turns))

    app = web.Application()
    app.router.add_post("/bot{token}/{method}", telegram)
    app.router.add_get(
        "/_matrix/client/v3/account/whoami", lambda r: web.json_response({"user_id": MATRIX_BOT, "device_id": "BENCH"})
    )
    app.router.add_get(
        "/_matrix/client/v3/profile/{user}/displayname", lambda r: web.json_response({"displayname": "bench"})
    )
    app.router.add_get("/_matrix/client/v3/sync", sync)
    app.router.add_put("/_matrix/client/v3/rooms/{room}/send/{type}/{txn}", matrix_send)
    app.router.add_get("/bench/{platform}/{what}", control)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port_out.put(runner.addresses[0][1])
    await asyncio.Event().wait()


async def _through_the_peer(url: str, platform: str, turns: int, samples: int) -> Result:
    """Have the peer at `url` play the people of `platform` while the bot's adapter answers them."""
    import httpx

    async with httpx.AsyncClient(base_url=url, timeout=600, trust_env=False) as control:

        async def run() -> float:
            return (await control.get(f"/bench/{platform}/converse", params={"turns": turns})).json()

        rate, cpu, in_gc, full = await _measured(run, turns)
        latency = (await control.get(f"/bench/{platform}/latency", params={"turns": samples})).json()
    return Result(rate, latency, cpu, in_gc, full)


async def through_telegram(url: str, turns: int, samples: int) -> Result:
    """Updates from the Bot API server by long polling, answered with `sendMessage`."""
    from core.adapter.telegram import TelegramAdapter

    os.environ["BENCH_TELEGRAM_TOKEN"] = f"{TELEGRAM_BOT_ID}:bench-token"
    adapter = TelegramAdapter(
        "tg", token_env="BENCH_TELEGRAM_TOKEN", api_url=url, poll_timeout=10, download_media=False
    )
    async with _bot(adapter):
        return await _through_the_peer(url, "telegram", turns, samples)


async def through_matrix(url: str, turns: int, samples: int) -> Result:
    """Events from the homeserver's /sync, answered with PUT send."""
    from core.adapter.matrix import MatrixAdapter

    os.environ["BENCH_MATRIX_TOKEN"] = "bench-token"
    adapter = MatrixAdapter(
        "mx", homeserver=url, user_id=MATRIX_BOT, access_token_env="BENCH_MATRIX_TOKEN", sync_timeout=5
    )
    async with _bot(adapter):
        await asyncio.wait_for(adapter.wait_until(lambda s: s.syncs >= 1 and s.queued_events == 0), 30)
        return await _through_the_peer(url, "matrix", turns, samples)


# -- Discord: dpytest's backend in this process ------------------------------------------------------------------


async def through_discord(turns: int, samples: int) -> Result:
    """Guild messages mentioning the bot, made by dpytest and dispatched by discord.py; sends to dpytest's HTTP."""
    import discord
    import discord.ext.test as dpytest
    from discord.ext.test import backend, callbacks
    from discord.ext.test import factories as facts

    from core.adapter.discord import INTENTS, DiscordAdapter

    class OnDpytest(DiscordAdapter):
        intents = INTENTS | discord.Intents(members=True)  # dpytest keeps its members in the member cache

        async def connect(self) -> None:
            await self.client._async_setup_hook()
            dpytest.configure(self.client, text_channels=SESSIONS + samples, voice_channels=0, members=1)

        async def disconnect(self) -> None:
            pass

    os.environ["BENCH_DISCORD_TOKEN"] = "bench.discord.token"
    adapter = OnDpytest("dc", token_env="BENCH_DISCORD_TOKEN", typing=True)
    answered: asyncio.Queue[int] = asyncio.Queue()
    async with _bot(adapter):
        config = dpytest.get_config()
        member = config.members[0]
        # conversations in the first SESSIONS channels, latency samples in the rest
        channels = dict(
            zip(
                [FIRST_CHAT + n for n in range(SESSIONS)] + [FIRST_SAMPLE + n for n in range(samples)],
                config.channels,
                strict=True,
            )
        )
        chat_of = {channel.id: chat for chat, channel in channels.items()}
        mention = f"<@{adapter.client.user.id}> "
        waiting: asyncio.Queue[tuple[int, str]] = asyncio.Queue()
        # The gateway's MESSAGE_CREATE of each chat, made once by dpytest's factories; each message is a copy with
        # its own id and text, handed to discord.py's parser as the gateway hands it an event. (dpytest's
        # make_message builds every payload anew and keeps it: its work and memory, charged to the bot's process.)
        templates = {
            chat: facts.make_message_dict(
                channel, member, content="", mentions=backend.find_user_mentions(mention, channel.guild)
            )
            for chat, channel in channels.items()
        }
        ids = itertools.count(discord.utils.time_snowflake(discord.utils.utcnow()))
        state = backend.get_state()

        async def on_send(message: discord.Message) -> None:
            answered.put_nowait(chat_of[message.channel.id])

        async def write() -> None:
            # parsing dispatches at once: done here, not inside dpytest's send callback
            while True:
                chat, text = await waiting.get()
                n = next(ids)
                content = mention + text
                state.parse_message_create(
                    {**templates[chat], "id": n, "content": content, "timestamp": discord.utils.snowflake_time(n)}
                )

        callbacks.set_callback(on_send, "send_message")
        writer = asyncio.create_task(write())
        try:
            inject: Inject = lambda chat, text: waiting.put_nowait((chat, text))  # noqa: E731
            rate, cpu, in_gc, full = await _measured(lambda: converse(inject, answered, turns, SESSIONS), turns)
            latency = await one_at_a_time(inject, answered, samples)
        finally:
            writer.cancel()
    return Result(rate, latency, cpu, in_gc, full)


# -- the run -----------------------------------------------------------------------------------------------------


def _spread(values: list[float], unit: str = "x") -> str:
    """The median of `values` and their range."""
    return f"{statistics.median(values):.2f}{unit} (range {min(values):.2f}-{max(values):.2f}{unit})"


def _report(name: str, description: str, pairs: list[tuple[Result, Result]]) -> None:
    kit, runs = [k for k, _ in pairs], [r for _, r in pairs]
    per_pair = [r.rate / k.rate for k, r in pairs]
    ratio = statistics.median(per_pair)
    kit_ms = statistics.median(statistics.median(r.latency) for r in kit) * 1e3
    run_ms = statistics.median(statistics.median(r.latency) for r in runs) * 1e3
    print(
        f"{name} ({description}): {statistics.median(r.rate for r in runs):,.0f} messages/s (median), "
        f"kit {statistics.median(k.rate for k in kit):,.0f} in the same pairs"
    )
    print(
        f"  {name} / kit, messages/s: {ratio:.2f}x, the median of {len(pairs)} pairs "
        f"({', '.join(f'{r:.2f}' for r in per_pair)}; range {min(per_pair):.2f}-{max(per_pair):.2f}x); "
        f"target at least {TARGET:.2f}x: {'met' if ratio >= TARGET else 'NOT met'}"
    )
    print(
        f"  kit / {name}, CPU of the bot's process per message: {_spread([k.cpu / r.cpu for k, r in pairs])}; "
        f"kit {statistics.median(k.cpu for k in kit) * 1e6:,.0f} us, {name} "
        f"{statistics.median(r.cpu for r in runs) * 1e6:,.0f} us; wall time in the collector kit "
        f"{statistics.median(k.gc for k in kit) * 1e6:,.0f} us, {name} {statistics.median(r.gc for r in runs) * 1e6:,.0f}"
        f" us; full collections per run kit {statistics.median(k.full_collections for k in kit):g}, {name} "
        f"{statistics.median(r.full_collections for r in runs):g}"
    )
    print(
        f"  latency per message, one at a time (median): kit {kit_ms:.2f} ms, {name} {run_ms:.2f} ms; the adapter "
        f"adds {run_ms - kit_ms:.2f} ms"
    )


async def main(chosen: list[str], rounds: int) -> None:
    logging.disable(logging.WARNING)
    cpus = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if cpus:
        os.sched_setaffinity(0, {cpus[0]})  # the bot on one core, the peer process on another
    ports: multiprocessing.Queue = multiprocessing.Queue()
    peer = multiprocessing.Process(target=_peer_process, args=(ports, cpus[-1] if len(cpus) > 1 else None), daemon=True)
    peer.start()
    try:
        url = f"http://127.0.0.1:{await asyncio.to_thread(ports.get, True, 30)}"
        paths: dict[str, Callable[[int, int], Awaitable[Result]]] = {
            "kit": through_the_kit,
            "telegram": lambda turns, samples: through_telegram(url, turns, samples),
            "matrix": lambda turns, samples: through_matrix(url, turns, samples),
            "discord": through_discord,
        }
        for name in ["kit", *chosen]:
            await paths[name](200, 10)  # warm-up: imports, first database, parser caches
        pairs: dict[str, list[tuple[Result, Result]]] = {name: [] for name in chosen}
        for n in range(rounds):
            # each adapter next to a kit run of its own, which goes first every other time
            for index, name in enumerate(chosen):
                order = ["kit", name] if (n + index) % 2 == 0 else [name, "kit"]
                done: dict[str, Result] = {}
                for path in order:
                    gc.collect()
                    done[path] = await paths[path](TURNS, LATENCY_SAMPLES)
                pairs[name].append((done["kit"], done[name]))
    finally:
        peer.terminate()
        peer.join()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    print(
        f"{TURNS:,} messages in {SESSIONS} conversations at once (each message answered before the next), chat + "
        f"builtin_tags plugins, history on, heap frozen after start as `hookchat run` does, bot pinned to one core; "
        f"{rounds} rounds of (kit, adapter) pairs; load average at the end {load} on {len(cpus)} cores"
    )
    kit = [k for name in chosen for k, _ in pairs[name]]
    print(
        f"testing kit (RecordingAdapter): {statistics.median(k.rate for k in kit):,.0f} messages/s (median; range "
        f"{min(k.rate for k in kit):,.0f}-{max(k.rate for k in kit):,.0f}) over {len(kit)} runs"
    )
    for name in chosen:
        _report(name, DESCRIPTIONS[name], pairs[name])


#: The adapters this bench measures, each with how its messages travel.
DESCRIPTIONS = {
    "telegram": "long polling a Bot API server in another process over loopback",
    "matrix": "/sync long polling a homeserver in another process over loopback",
    "discord": "dpytest's backend in the bot's process",
}

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--adapter", action="append", choices=list(DESCRIPTIONS), help="measure this adapter (repeat it; default all)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="(kit, adapter) pairs of each adapter, alternating which goes first (default 5)",
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.adapter or list(DESCRIPTIONS), arguments.rounds))
