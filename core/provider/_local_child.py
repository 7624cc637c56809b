"""The embedded model's own process: `LocalLlamaProvider` runs xllamacpp's `Server` here, so that its constructor,
which holds the GIL for its whole run, cannot stall the provider's event loop.

Run as `python -P _local_child.py PARENT_PID` (the standard library and xllamacpp only: importing hookchat's
`core.provider` would add about a second to every start). It talks to the provider over its stdin and stdout, one
line per message, and opens no socket of its own:

- parent to child: first the settings (a JSON object), then for each request its body (a JSON object, as
  `handle_chat_completions` takes it) or `stop` (end the request under way at its next chunk);
- child to parent: `ready`, `missing <reason>` (xllamacpp cannot be imported) or `failed <reason>` (the model does not
  load) once, the reasons JSON strings; then for each request every chunk the server sends (a JSON object on one
  line) and `end`, or `end <error as a JSON string>` when the server refused the request.

It exits when its stdin closes (the provider closed it, or the provider's process died) and, on Linux, at once when
the thread that started it dies (`PR_SET_PDEATHSIG`), even in the middle of loading.
"""

from __future__ import annotations

import ctypes
import json
import os
import queue
import signal
import sys
import threading
from typing import Any, BinaryIO

_PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    """Load the model of the settings on stdin, then serve requests until stdin closes."""
    parent = int(argv[0])
    # Ctrl-C in a terminal reaches the whole process group: the provider stops the request, the model stays.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent:  # the provider died before the line above took effect
        return 1
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # whatever native code prints goes to stderr, not into the messages
    settings = json.loads(sys.stdin.buffer.readline() or "null")
    if not isinstance(settings, dict):
        return 1
    try:
        server = _load(settings)
    except ImportError as exc:
        _write(out, b"missing " + json.dumps(str(exc)).encode())
        return 0
    except (RuntimeError, ValueError) as exc:
        _write(out, b"failed " + json.dumps(str(exc)).encode())
        return 0
    _write(out, b"ready")
    jobs: queue.SimpleQueue[tuple[str, threading.Event]] = queue.SimpleQueue()
    threading.Thread(target=_serve, args=(server, jobs, out), daemon=True).start()
    stop = threading.Event()
    for line in sys.stdin.buffer:
        if line.strip() == b"stop":
            stop.set()
        else:  # each request its own event: a late `stop` for the one before cannot stop it
            stop = threading.Event()
            jobs.put((line.decode(), stop))
    os._exit(0)  # without the server's destructor, which joins its threads


def _load(settings: dict[str, Any]) -> Any:
    """The server for `settings`: the provider's model file, window, batch, threads and chat template."""
    sys.path.append(settings["xllamacpp_path"])  # where the provider found it, should this process not
    import xllamacpp

    params = xllamacpp.CommonParams()  # pyright: ignore[reportAttributeAccessIssue] - compiled, no stubs
    params.model.path = settings["model"]
    params.n_ctx = settings["context_tokens"]
    params.n_parallel = 1  # one slot with the whole window; the provider sends one request at a time
    params.n_batch = params.n_ubatch = settings["batch"]
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = settings["threads"]
    params.warmup = False  # the first request warms up
    params.verbosity = -1
    if settings["chat_template"]:
        params.chat_template = settings["chat_template"]
    # The server also answers HTTP on a loopback port (it cannot be turned off); a random key keeps everyone off it.
    # The provider's requests come through the pipe.
    params.hostnames, params.port, params.api_keys = ["127.0.0.1"], 0, [os.urandom(24).hex()]
    params.n_threads_http, params.ui, params.endpoint_slots = 1, False, False
    return xllamacpp.Server(params)  # pyright: ignore[reportAttributeAccessIssue] - compiled, no stubs


def _serve(server: Any, jobs: queue.SimpleQueue[tuple[str, threading.Event]], out: BinaryIO) -> None:
    """The model thread: runs one request after another, writing each chunk as it comes and `end` after the last."""
    while True:
        body, stop = jobs.get()

        def on_chunk(data: str, stop: threading.Event = stop) -> bool:
            if stop.is_set():
                return True  # tells the server to stop
            # A line per chunk: the server's JSON has no line breaks outside strings, and none may be inside one.
            _write(out, data.replace("\n", " ").encode())
            return False

        end = b"end"
        try:
            server.handle_chat_completions(body, on_chunk)
        except Exception as exc:  # ValueError: a request the server cannot take
            end = b"end " + json.dumps(str(exc)).encode()
        _write(out, end)


def _write(out: BinaryIO, line: bytes) -> None:
    try:
        out.write(line + b"\n")
        out.flush()
    except OSError:  # the provider has gone: nobody is listening
        os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
