"""Messages per second and the latency each platform adapter adds, against the testing kit (`ChatHarness`, its
`RecordingAdapter`) in the same run.

Run: nice .venv/bin/python bench/adapters.py [--adapter telegram --adapter matrix ...] [--rounds N]
Target: each adapter at least 0.7x the kit's rate (the median of the per-round ratios), printed with met / not met.

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
scripted model, the bot pinned to one core and the peer process to the other. Each path runs `--rounds` times,
alternating which goes first, each from a collected heap; the headline ratio is the median of the per-round ratios.
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
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.app import HookChat
from core.chat import KiraIMSentResult, MessageChain, Session
from core.config import HookchatConfig
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider

TURNS = 1_000
SESSIONS = 20
LATENCY_SAMPLES = 100
TARGET = 0.7
REPLY = "<msg><text>Hello there!</text></msg>"
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}
FIRST_CHAT = 20_000  # conversation n is chat FIRST_CHAT + n
FIRST_SAMPLE = 30_000  # latency sample n is chat FIRST_SAMPLE + n

#: (rate in messages/s, latency per message in seconds, CPU seconds of the bot's process per message) of one run.
Result = tuple[float, list[float], float]
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
async def _bot(adapter: Any, messages: int) -> AsyncIterator[HookChat]:
    """hookchat with `adapter`, the bench's plugins and a model scripted for `messages` answers."""
    provider = ScriptedProvider([REPLY] * messages)
    plugins = [BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags"]
    with tempfile.TemporaryDirectory() as data_dir:
        async with HookChat(
            _config(data_dir), provider=provider, adapters=[adapter], entry_points=False, plugins=plugins
        ) as app:
            yield app


# -- the kit ---------------------------------------------------------------------------------------------------


async def through_the_kit(turns: int, samples: int) -> Result:
    """The messages delivered straight to the app, answered into the kit's `RecordingAdapter`."""
    provider = ScriptedProvider([REPLY] * (turns + samples))
    answered: asyncio.Queue[int] = asyncio.Queue()
    async with ChatHarness(provider=provider, config={"plugins": {"config": PLUGIN_CONFIG}}) as bot:
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
        cpu = time.process_time()
        rate = await converse(inject, answered, turns, SESSIONS)
        cpu = (time.process_time() - cpu) / turns
        latency = await one_at_a_time(inject, answered, samples)
        assert len(bot.adapter.sent) == turns + samples
    return rate, latency, cpu


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
        form = await request.post()
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
        cpu = time.process_time()
        rate = (await control.get(f"/bench/{platform}/converse", params={"turns": turns})).json()
        cpu = (time.process_time() - cpu) / turns
        latency = (await control.get(f"/bench/{platform}/latency", params={"turns": samples})).json()
    return rate, latency, cpu


async def through_telegram(url: str, turns: int, samples: int) -> Result:
    """Updates from the Bot API server by long polling, answered with `sendMessage`."""
    from core.adapter.telegram import TelegramAdapter

    os.environ["BENCH_TELEGRAM_TOKEN"] = f"{TELEGRAM_BOT_ID}:bench-token"
    adapter = TelegramAdapter(
        "tg", token_env="BENCH_TELEGRAM_TOKEN", api_url=url, poll_timeout=10, download_media=False
    )
    async with _bot(adapter, turns + samples):
        return await _through_the_peer(url, "telegram", turns, samples)


async def through_matrix(url: str, turns: int, samples: int) -> Result:
    """Events from the homeserver's /sync, answered with PUT send."""
    from core.adapter.matrix import MatrixAdapter

    os.environ["BENCH_MATRIX_TOKEN"] = "bench-token"
    adapter = MatrixAdapter(
        "mx", homeserver=url, user_id=MATRIX_BOT, access_token_env="BENCH_MATRIX_TOKEN", sync_timeout=5
    )
    async with _bot(adapter, turns + samples):
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
    async with _bot(adapter, turns + samples):
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
            cpu = time.process_time()
            rate = await converse(inject, answered, turns, SESSIONS)
            cpu = (time.process_time() - cpu) / turns
            latency = await one_at_a_time(inject, answered, samples)
        finally:
            writer.cancel()
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
        f"{name} ({description}): {statistics.median(r[0] for r in runs):,.0f} messages/s (median), "
        f"kit {statistics.median(k[0] for k in kit):,.0f}"
    )
    print(
        f"  {name} / kit: {ratio:.2f}x, the median of the rounds ({', '.join(f'{r:.2f}x' for r in per_round)}); "
        f"target at least {TARGET:.2f}x: {'met' if ratio >= TARGET else 'NOT met'}"
    )
    print(
        f"  latency per message, one at a time (median): kit {kit_ms:.2f} ms, {name} {run_ms:.2f} ms; the adapter "
        f"adds {run_ms - kit_ms:.2f} ms; CPU per message kit {kit_cpu:,.0f} us, {name} {run_cpu:,.0f} us"
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
        runs: dict[str, list[Result]] = {name: [] for name in ["kit", *chosen]}
        for n in range(rounds):
            for name in ["kit", *chosen] if n % 2 == 0 else [*reversed(chosen), "kit"]:
                gc.collect()
                runs[name].append(await paths[name](TURNS, LATENCY_SAMPLES))
    finally:
        peer.terminate()
        peer.join()
    load = " ".join(f"{x:.1f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "unknown"
    kit = runs["kit"]
    print(
        f"{TURNS:,} messages in {SESSIONS} conversations at once (each message answered before the next), chat + "
        f"builtin_tags plugins, history on, bot pinned to one core; {rounds} rounds; load average at the end {load} "
        f"on {len(cpus)} cores"
    )
    print(f"testing kit (RecordingAdapter): {statistics.median(k[0] for k in kit):,.0f} messages/s (median)")
    for name in chosen:
        _report(name, DESCRIPTIONS[name], kit, runs[name])


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
    parser.add_argument("--rounds", type=int, default=5, help="runs of each path, alternating the order (default 5)")
    arguments = parser.parse_args()
    asyncio.run(main(arguments.adapter or list(DESCRIPTIONS), arguments.rounds))
