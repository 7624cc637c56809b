"""One SQLite connection owned by one worker thread, so a plugin's store and database never block the event loop.

Jobs run in the order they were submitted; the thread starts on the first job and stops on `close()`.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from core.services._result import SdkError

__all__ = ["SqliteWorker", "StorageClosedError"]

T = TypeVar("T")

_Job = tuple[Callable[[sqlite3.Connection], Any], "asyncio.Future[Any]", asyncio.AbstractEventLoop] | None


class StorageClosedError(SdkError):
    """The store or database was closed (its plugin stopped); it cannot run queries any more."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="storage_closed")


def _settle(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():  # the caller was cancelled; the job ran anyway
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


class SqliteWorker:
    """Runs `fn(connection)` jobs on one thread that owns the connection to `path` (WAL mode).

    `setup(connection)` runs once after connecting (create tables). A job whose caller was cancelled still runs.
    """

    def __init__(self, path: Path, *, name: str, setup: Callable[[sqlite3.Connection], None] | None = None) -> None:
        self.path = Path(path)
        self.name = name
        self._setup = setup
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    async def run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run `fn(connection)` on the worker thread and return its result (or raise its exception)."""
        if self._closed:
            raise StorageClosedError(f"{self.name} is closed (its plugin stopped)")
        loop = asyncio.get_running_loop()
        if self._thread is None:
            self._thread = threading.Thread(target=self._work, name=f"hookchat-{self.name}", daemon=True)
            self._thread.start()
        fut: asyncio.Future[T] = loop.create_future()
        self._queue.put((fn, fut, loop))
        return await fut

    async def close(self) -> None:
        """Finish the queued jobs, then close the connection and stop the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._queue.put(None)
        done = asyncio.get_running_loop().create_future()

        def join() -> None:
            thread.join()
            try:
                done.get_loop().call_soon_threadsafe(_settle, done, True, None)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        threading.Thread(target=join, name=f"hookchat-{self.name}-join", daemon=True).start()
        await asyncio.shield(done)

    def _work(self) -> None:
        conn: sqlite3.Connection | None = None
        failure: BaseException | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            if self._setup is not None:
                self._setup(conn)
                conn.commit()
        except Exception as exc:  # reported to every job instead
            failure = SdkError(f"cannot open {self.name} at {self.path}: {exc}", code="storage_unavailable")
        while True:
            job = self._queue.get()
            if job is None:
                break
            fn, fut, loop = job
            if failure is not None or conn is None:
                ok, value = False, failure
            else:
                try:
                    ok, value = True, fn(conn)
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting caller
                    ok, value = False, exc
            try:
                loop.call_soon_threadsafe(_settle, fut, ok, value)
            except RuntimeError:  # the caller's loop is closed
                pass
        if conn is not None:
            conn.close()
