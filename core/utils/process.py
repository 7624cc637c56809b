"""Ending a long-running command on a signal: `StopSignals` turns SIGINT and SIGTERM into an orderly shutdown with
a bound, after which (or at a second signal) the process exits from a thread, whatever still runs."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys
import threading
from collections.abc import Awaitable
from typing import Any

__all__ = ["StopSignals"]


class StopSignals:
    """SIGINT and SIGTERM for `hookchat run` and `hookchat web` (systemd, Docker and Kubernetes stop a service with
    SIGTERM). `install()` in the running loop; `await wait(work)` returns at the first signal (or when `work`, the
    console's input loop, ends); the caller then shuts the app down and calls `leave()`.

    The first signal also starts a timer of `timeout` seconds (`[deadlines] shutdown_timeout`) in a daemon
    thread: past it, or at a second signal, the process exits from that thread, so not even plugin code that
    blocks the event loop can hold it. Handlers run as loop callbacks, so no `KeyboardInterrupt` is ever raised
    inside plugin code: every one a plugin sees is its own.
    """

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self.signal: int | None = None
        self._requested = asyncio.Event()
        self._closed = False  # the shutdown finished: an exit past the bound loses nothing

    def install(self) -> None:
        """Handle SIGINT and SIGTERM in the running loop (the console's input loop takes SIGINT while it runs)."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._received, sig)

    @property
    def exit_code(self) -> int:
        """0 after SIGTERM (an ordinary stop), 130 after Ctrl-C, as a shell reports it."""
        return 130 if self.signal == signal.SIGINT else 0

    async def wait(self, work: Awaitable[None] | None = None) -> None:
        """Wait for a signal, or until `work` ends (it is cancelled when the signal comes first)."""
        waiting: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._requested.wait())]
        if work is not None:
            waiting.append(asyncio.ensure_future(work))
        try:
            await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waiting:
                task.cancel()
            await asyncio.wait(waiting)

    def leave(self) -> None:
        """After the app closed: exit at once when abandoned tasks are left (`asyncio.run` would wait for them
        for ever); otherwise return, and the command ends normally."""
        self._closed = True
        current = asyncio.current_task()
        left = [t for t in asyncio.all_tasks() if t is not current and not t.done()]
        if left and self.signal is not None:
            self._exit_now(
                f"[hookchat] {len(left)} abandoned task(s) still running; exiting without them", self.exit_code
            )

    def _received(self, sig: int) -> None:
        name = signal.Signals(sig).name
        if self.signal is not None:
            self._exit_now(f"hookchat: {name} again: exiting without finishing the shutdown", 1)
        self.signal = sig
        self._requested.set()
        print(
            f"[hookchat] {name}: shutting down (at most {self.timeout:g} s, [deadlines] shutdown_timeout)",
            file=sys.stderr,
            flush=True,
        )
        timer = threading.Timer(self.timeout, self._overdue)
        timer.daemon = True
        timer.start()

    def _overdue(self) -> None:
        if self._closed:
            self._exit_now(None, self.exit_code)
        self._exit_now(
            f"hookchat: the shutdown did not finish within {self.timeout:g} s ([deadlines] "
            "shutdown_timeout): exiting anyway",
            1,
        )

    @staticmethod
    def _exit_now(message: str | None, code: int) -> None:
        if message:
            print(message, file=sys.stderr)
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
