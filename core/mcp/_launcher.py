"""The small launcher every stdio MCP server runs under, so no server outlives hookchat, even a `kill -9`.

Run as `python -I -S _launcher.py PARENT_PID -- COMMAND ARGS...` (standard library only, nothing of hookchat is
imported). The SDK starts it in a new process group; it starts the server in that group and waits for it.
When hookchat dies, the kernel sends this launcher SIGTERM (Linux `PR_SET_PDEATHSIG`; elsewhere a poll of the
parent pid notices within half a second), and the launcher kills the whole group: the server and anything the
server started (`uvx`, `npx` children). The launcher exits with the server's status.

It also relays the server's stdout, line by line, and bounds each line (one JSON-RPC message) to `MAX_LINE`
bytes: the SDK's stdio reader joins the chunks of a line quadratically, so a 50 MB line would hold hookchat's event
loop for many seconds. An oversized message is dropped and, when its request id can be read, answered with a
JSON-RPC error in its place, so the call fails at once instead of at its deadline.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import threading

_PR_SET_PDEATHSIG = 1
_POLL_SECONDS = 0.5
#: Bytes of one message (one line) a stdio server may send.
MAX_LINE = 4 * 1024 * 1024
_ID = re.compile(rb'"id"\s*:\s*("(?:[^"\\]|\\.){0,200}"|-?\d{1,20})')


def _kill_group(*_: object) -> None:
    """Kill every process of this launcher's group (the server and its children), then this launcher."""
    try:
        os.killpg(os.getpgrp(), signal.SIGKILL)
    finally:
        os._exit(137)


def _watch_parent(parent: int) -> None:
    """Where the kernel cannot tell us (not Linux): notice the parent's death by our being re-parented."""
    while True:
        if os.getppid() != parent:
            _kill_group()
        threading.Event().wait(_POLL_SECONDS)


def _too_long(head: bytes, size: int) -> bytes:
    """What replaces a message of `size` bytes that starts with `head`: an error answer to its request, or
    nothing when no id is found (a notification, or an id past the first bytes)."""
    found = _ID.search(head)
    if found is None:
        return b""
    error = {
        "jsonrpc": "2.0",
        "id": json.loads(found.group(1)),
        "error": {
            "code": -32603,
            "message": f"the server's answer was {size} bytes or more, over the "
            f"{MAX_LINE} bytes hookchat accepts from one message",
        },
    }
    return json.dumps(error).encode() + b"\n"


def relay(source: int, target: int) -> None:
    """Copy lines from `source` to `target` until end-of-file, replacing each line over `MAX_LINE` bytes."""
    pending: list[bytes] = []  # the current line's chunks
    size = 0
    dropping = False
    head = b""
    while True:
        chunk = os.read(source, 65536)
        if not chunk:
            return
        start = 0
        while start < len(chunk):
            end = chunk.find(b"\n", start)
            piece = chunk[start:] if end < 0 else chunk[start : end + 1]
            start = len(chunk) if end < 0 else end + 1
            if dropping:
                size += len(piece)
            else:
                pending.append(piece)
                size += len(piece)
                if size > MAX_LINE:
                    head = b"".join(pending)[:512]
                    pending, dropping = [], True
            if end < 0:
                continue
            line = _too_long(head, size) if dropping else b"".join(pending)
            if line:
                _write_all(target, line)
            pending, size, dropping, head = [], 0, False, b""


def _write_all(target: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(target, view) :]


def main(argv: list[str]) -> int:
    """Start the server of `argv` (`PARENT_PID -- COMMAND ARGS...`) and tie its group's life to the parent."""
    if len(argv) < 3 or argv[1] != "--":
        print("usage: _launcher.py PARENT_PID -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    parent = int(argv[0])
    signal.signal(signal.SIGTERM, _kill_group)
    signal.signal(signal.SIGHUP, _kill_group)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:  # hookchat died before the line above took effect
        return 137
    if not sys.platform.startswith("linux"):
        threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:  # inherits stdin, stderr, the environment and the group; stdout comes through `relay`
        server = subprocess.Popen(argv[2:], stdout=subprocess.PIPE)
    except OSError as exc:
        print(f"hookchat: cannot start the MCP server {argv[2]!r}: {exc}", file=sys.stderr)
        return 127
    # Only the server may read hookchat's requests.
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    assert server.stdout is not None
    relay(server.stdout.fileno(), 1)
    while True:
        try:
            code = server.wait()
            break
        except InterruptedError:
            continue
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
