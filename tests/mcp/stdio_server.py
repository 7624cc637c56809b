"""A stdio MCP server for the tests, made with the SDK's own server API (`MCPServer`): `echo`, `huge` (megabytes of text), `hold` (blocks,
after writing its process id to $HOLD_PID_FILE, so a test can kill it mid-call) and `spawn_child` (starts a child
process that sleeps and writes its pid to $CHILD_PID_FILE, so a test can check nothing of the server survives).
With `--http PORT` it serves streamable HTTP instead (bench/mcp.py)."""

import asyncio
import os
import subprocess
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("tests-stdio")


@server.tool()
def echo(text: str) -> str:
    """Return the text."""
    return f"echo: {text}"


@server.tool()
async def hold(seconds: float) -> str:
    """Wait `seconds`, then answer."""
    Path(os.environ["HOLD_PID_FILE"]).write_text(str(os.getpid()))
    await asyncio.sleep(seconds)
    return "held"


@server.tool()
def huge(megabytes: int) -> str:
    """Answer that many megabytes of text."""
    return "y" * (megabytes * 1024 * 1024)


@server.tool()
def spawn_child() -> str:
    """Start a child process that sleeps for five minutes."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    Path(os.environ["CHILD_PID_FILE"]).write_text(f"{os.getpid()} {child.pid}")
    return "spawned"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--http"]:  # bench/mcp.py: the same tools over streamable HTTP on 127.0.0.1:PORT
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
