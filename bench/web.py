"""Turns per second through the web chat's WebSocket on loopback, against the same turns through the testing kit
(`ChatHarness.send`, no socket) in the same run: the cost of the browser's path (JSON frames, the socket, the web
adapter) on top of the pipeline. One bot, the built-in plugins, history and tracing on, a scripted model.
`SESSIONS` sessions chat at once on both paths (each message waits for its turn to end); the web clients run in a
process of their own, as browsers do.

Run: .venv/bin/python bench/web.py
Target: web turns/s at least 0.8x the testing kit's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from websockets.asyncio.client import connect

from core.testing import ChatHarness, ScriptedProvider
from core.web import WebConsole

TURNS = 200  # per session and round
SESSION_COUNTS = (8, 1)  # the target is for 8 sessions at once; 1 shows the latency of one round trip per turn
ROUNDS = 4
REPLY = "<msg>Hello there!</msg>"


async def kit_turns(bot: ChatHarness, name: str, sessions: int) -> float:
    async def session(user: str) -> None:
        for i in range(TURNS):
            chains = await bot.send(f"message {i}", user_id=user)
            assert chains, "the bot answers every turn"

    start = time.perf_counter()
    await asyncio.gather(*(session(f"{name}-{s}") for s in range(sessions)))
    return sessions * TURNS / (time.perf_counter() - start)


#: The console's token in this benchmark (the console always has one; the client process is told this one).
BENCH_TOKEN = "bench-web-console-token"


async def web_turns(url: str, name: str, sessions: int) -> float:
    async def session(ws) -> None:
        for i in range(TURNS):
            await ws.send(json.dumps({"type": "message", "text": f"message {i}"}))
            while True:
                frame = json.loads(await ws.recv())
                if frame["type"] == "turn_ended":
                    assert frame["sent"] == 1, frame
                    break

    base = url.replace("http://", "ws://")
    auth = {"Authorization": f"Bearer {BENCH_TOKEN}"}
    sockets = [
        await connect(f"{base}/ws/chat?session={name}-{s}", compression=None, additional_headers=auth)
        for s in range(sessions)
    ]
    for ws in sockets:
        assert json.loads(await ws.recv())["type"] == "ready"
    start = time.perf_counter()
    await asyncio.gather(*(session(ws) for ws in sockets))
    elapsed = time.perf_counter() - start
    for ws in sockets:
        await ws.close()
    return sessions * TURNS / elapsed


async def web_turns_elsewhere(url: str, name: str, sessions: int) -> float:
    """`web_turns` in a child process (this file with `--client`)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", url, name, str(sessions), stdout=asyncio.subprocess.PIPE
    )
    out, _ = await child.communicate()
    if child.returncode != 0:
        raise RuntimeError(f"the web client failed ({child.returncode})")
    return float(out.decode().strip())


async def main() -> None:
    logging.getLogger("hookchat").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory() as data:
        provider = ScriptedProvider([REPLY] * (sum(SESSION_COUNTS) * TURNS * (ROUNDS + 1) * 2))
        async with ChatHarness(provider=provider, config={"data": {"dir": data}}) as bot:
            console = WebConsole(bot.app, port=0, token=BENCH_TOKEN)
            async with console:
                await kit_turns(bot, "warm", 1)  # warm up both paths once
                await web_turns_elsewhere(console.url, "warm", 1)
                print(f"{'sessions':>8} {'kit turns/s':>12} {'web turns/s':>12} {'web / kit':>10}")
                for sessions in SESSION_COUNTS:
                    kit = web = 0.0
                    for r in range(ROUNDS):  # interleaved, so a busy machine slows both alike; best round each
                        kit = max(kit, await kit_turns(bot, f"kit{sessions}-{r}", sessions))
                        web = max(web, await web_turns_elsewhere(console.url, f"web{sessions}-{r}", sessions))
                    print(f"{sessions:>8} {kit:>12.0f} {web:>12.0f} {web / kit:>10.2f}")
    print("target: web / kit >= 0.8 with 8 sessions at once")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--client"]:
        print(asyncio.run(web_turns(sys.argv[2], sys.argv[3], int(sys.argv[4]))))
    else:
        asyncio.run(main())
