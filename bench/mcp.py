"""A tool call through hookchat's MCP client against the SDK's own client calling the same server directly, in one
run: one server process (the tests' `tests/mcp/stdio_server.py`, the SDK's `MCPServer`, serving streamable HTTP on
loopback), two clients of it, an `echo` call each time.

Run: .venv/bin/python bench/mcp.py
"Through hookchat" is the tool the model calls (`McpTool.invoke`: the connection's session, our relay of the
transport's messages, the result turned into a `ToolResult`, the trace check); the baseline is
`ClientSession.call_tool` on the SDK's `streamable_http_client`, to the same server. Each figure is the best of many
short interleaved rounds (the machine is shared: a round another process interrupts is simply not the best one).
Target: at most 1.1x the direct call, and under 1 ms added per call. A second line compares the same over stdio;
there each client needs its own server process, and hookchat's runs under the launcher (its stdout relay is
counted), so that line is noisier.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# This file is called mcp.py: its own folder first on the path would shadow the `mcp` package.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from mcp import ClientSession, StdioServerParameters, stdio_client  # noqa: E402 - after the sys.path fix above
from mcp.client.streamable_http import streamable_http_client  # noqa: E402 - after the sys.path fix above

from core.config import HookchatConfig  # noqa: E402 - after the sys.path fix above
from core.mcp import McpManager  # noqa: E402 - after the sys.path fix above
from core.utils.registry import OwnedRegistry  # noqa: E402 - after the sys.path fix above

SERVER = ROOT / "tests" / "mcp" / "stdio_server.py"
ENV = {"HOLD_PID_FILE": "/dev/null", "CHILD_PID_FILE": "/dev/null"}
CALLS = 40
ROUNDS = 40
TARGET_RATIO = 1.1
TARGET_ADDED_MS = 1.0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def compare(server: dict, direct_session: ClientSession) -> tuple[float, float]:
    """Best seconds per call: (direct, through hookchat)."""
    tools = OwnedRegistry("tool")
    manager = McpManager(HookchatConfig.model_validate({"mcp": {"servers": [server]}}), tools, data_dir=None)
    await manager.start()
    tool = tools.get("echo")
    assert tool is not None, manager.status()

    async def direct() -> None:
        for _ in range(CALLS):
            await direct_session.call_tool("echo", {"text": "hi"})

    async def hookchat() -> None:
        for _ in range(CALLS):
            await tool.invoke(None, {"text": "hi"})

    runs: dict[str, Callable[[], Awaitable[None]]] = {"direct": direct, "hookchat": hookchat}
    best = dict.fromkeys(runs, float("inf"))
    try:
        for run in runs.values():
            await run()  # warm up
        for _ in range(ROUNDS):
            for name, run in runs.items():
                started = time.perf_counter()
                await run()
                best[name] = min(best[name], (time.perf_counter() - started) / CALLS)
    finally:
        await manager.aclose()
    return best["direct"], best["hookchat"]


def report(what: str, direct: float, through: float, *, target: bool) -> None:
    ratio, added_ms = through / direct, (through - direct) * 1000
    print(
        f"{what}: SDK client {direct * 1e6:7.1f} us, through hookchat {through * 1e6:7.1f} us per call: "
        f"{ratio:.2f}x, {added_ms:+.3f} ms"
    )
    if target:
        met = ratio <= TARGET_RATIO and added_ms < TARGET_ADDED_MS
        print(f"  target <= {TARGET_RATIO}x and < {TARGET_ADDED_MS:g} ms added per call: {'met' if met else 'NOT met'}")


async def main() -> int:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, str(SERVER), "--http", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        for _ in range(200):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.1).close()
                break
            except OSError:
                await asyncio.sleep(0.05)
        async with streamable_http_client(url) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            http = await compare({"name": "bench", "url": url}, session)
    finally:
        process.terminate()
        process.wait()
    params = StdioServerParameters(command=sys.executable, args=[str(SERVER)], env=ENV)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        await session.list_tools()
        stdio = await compare({"name": "bench", "command": sys.executable, "args": [str(SERVER)], "env": ENV}, session)
    print(f"MCP tool call (echo), best of {ROUNDS} interleaved rounds of {CALLS} calls")
    report("streamable HTTP, one server", *http, target=True)
    report("stdio, a server per client ", *stdio, target=False)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
