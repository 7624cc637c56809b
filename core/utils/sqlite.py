"""One SQLite connection owned by one worker thread, so database work never blocks the event loop: the history, a
plugin's store and database, and the remote tool registry each run their queries through a `SqliteWorker`.
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, TypeVar

__all__ = ["SqliteWorker", "SqliteWorkerError", "SqliteClosedError", "SqliteOpenError"]

T = TypeVar("T")

MAX_BATCH = 512  # jobs committed in one transaction at most, so one commit never waits on an unbounded batch

_Job = tuple[Callable[[sqlite3.Connection], Any] | None, "asyncio.Future[Any]"]  # fn None: stop after this
_Outcome = tuple["asyncio.Future[Any]", bool, Any]


class SqliteWorkerError(RuntimeError):
    """The worker could not run a job for a reason of its own (closed, or its database never opened)."""


class SqliteClosedError(SqliteWorkerError):
    """The worker was closed; it runs no more jobs."""


class SqliteOpenError(SqliteWorkerError):
    """The database could not be opened (or its setup failed); the cause is chained. Every job gets this error."""


class _BatchBroken(Exception):
    """A database error ended the group's transaction, so the jobs before it lost their writes too."""


def _settle(outcomes: list[_Outcome]) -> None:
    for fut, ok, value in outcomes:
        if fut.done():  # the caller was cancelled; its job ran anyway
            continue
        if ok:
            fut.set_result(value)
        else:
            fut.set_exception(value)


def _post(outcomes: list[_Outcome]) -> None:
    """Hand outcomes to the loops that wait for them: one callback per loop, never a blocking call."""
    if not outcomes:
        return
    first_loop = outcomes[0][0].get_loop()
    by_loop: dict[asyncio.AbstractEventLoop, list[_Outcome]] = {first_loop: outcomes}
    if any(fut.get_loop() is not first_loop for fut, _, _ in outcomes):
        by_loop = {}
        for outcome in outcomes:
            by_loop.setdefault(outcome[0].get_loop(), []).append(outcome)
    for loop, mine in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle, mine)
        except RuntimeError:  # that loop is closed: nobody waits any more
            pass


def _rollback(conn: sqlite3.Connection) -> None:
    if conn.in_transaction:
        try:
            conn.execute("ROLLBACK")
        except sqlite3.Error:
            pass


class SqliteWorker:
    """Runs `fn(connection)` jobs, first in first out, on one thread that owns the only connection to `path`.

    The database is opened in WAL mode with `synchronous` (NORMAL: a committed transaction survives a killed
    process; FULL: also a power loss, at an fsync per commit), then `setup(connection)` runs once (create tables)
    and is committed. The thread starts on `open()` or on the first `submit()`, whichever comes first; a failure to
    open is raised by `open()` and by every job as `SqliteOpenError`.

    Without `group_commit` each job owns its transactions (the `sqlite3` module's default mode: a write opens a
    transaction, `conn.commit()` or `with conn:` ends it). With `group_commit` the worker owns them (a job must not
    commit or roll back): the jobs queued while a transaction runs are run together in the next one (up to 512)
    and committed at once. A job that raises has its own writes rolled back to a savepoint and its caller gets the
    exception, while the others still commit; if the database fails the whole transaction, each job is run again
    alone, so only the callers whose job fails see an error. A group-commit job may therefore run twice (after a
    rollback) and must be safe to. Either way a caller's future resolves after the commit that holds its job.
    `database_error(exc)`, when given, is what a caller gets instead of a `sqlite3.Error` (chained to it).

    A job whose caller was cancelled still runs. `close()` lets the queued jobs finish first; `submit()` after
    it raises `SqliteClosedError`. Results go back to each caller's loop with `call_soon_threadsafe`, so the thread
    never blocks an event loop.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        name: str,
        setup: Callable[[sqlite3.Connection], object] | None = None,
        group_commit: bool = False,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
        database_error: Callable[[sqlite3.Error], Exception] | None = None,
    ) -> None:
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = path if str(path) == ":memory:" else Path(path)
        self.name = name
        self.group_commit = group_commit
        self.synchronous = synchronous
        self._setup = setup
        self._database_error = database_error
        self._queue: queue.SimpleQueue[_Job] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._ready: asyncio.Future[SqliteOpenError | None] | None = None
        self._closed = False

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._closed

    async def open(self) -> None:
        """Start the thread if it has not started, and return once the database is open and set up.

        Raises `SqliteOpenError` when it cannot be opened (the worker then answers every job with that error until
        it is closed), `SqliteClosedError` after `close()`.
        """
        self._start()
        assert self._ready is not None
        failure = await asyncio.shield(self._ready)  # shared by every open(); one cancelled caller must not void it
        if failure is not None:
            raise failure

    def submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        """Queue `fn(connection)` for the worker thread; the future resolves to its result (or its exception).

        A future, not a coroutine, because callers wrap it in coroutines of their own and each layer is paid on
        every query (measured by bench/history.py). Raises `SqliteClosedError` at once after `close()`.
        """
        self._start()
        fut: asyncio.Future[T] = asyncio.get_running_loop().create_future()
        self._queue.put((fn, fut))
        return fut

    async def close(self) -> None:
        """Let the queued jobs finish, then close the connection and end the thread. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self._thread is None:
            return
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.put((None, done))
        await asyncio.shield(done)  # a cancelled caller still leaves the worker stopping

    def _start(self) -> None:
        if self._closed:
            raise SqliteClosedError(f"{self.name} is closed")
        if self._thread is None:
            self._ready = asyncio.get_running_loop().create_future()
            self._thread = threading.Thread(target=self._work, name=f"hookchat-sqlite {self.name}", daemon=True)
            self._thread.start()

    # -- the thread ------------------------------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if isinstance(self.path, Path):
            self.path.parent.mkdir(parents=True, exist_ok=True)
        # With group commit the worker writes BEGIN and COMMIT itself, so the module must not open transactions.
        if self.group_commit:
            conn = sqlite3.connect(self.path, timeout=5.0, isolation_level=None)
        else:
            conn = sqlite3.connect(self.path, timeout=5.0)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode: a commit is in the WAL (the OS holds it) before it returns, so a killed process
            # loses nothing; only a power loss can drop the last commits.
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            if self._setup is not None:
                self._setup(conn)
                if conn.in_transaction:
                    conn.commit()
        except BaseException:
            conn.close()
            raise
        return conn

    def _work(self) -> None:
        assert self._ready is not None
        conn: sqlite3.Connection | None = None
        failure: SqliteOpenError | None = None
        try:
            conn = self._connect()
        except Exception as exc:
            failure = SqliteOpenError(f"cannot open {self.name} at {self.path}: {exc}")
            failure.__cause__ = exc
        _post([(self._ready, True, failure)])  # a result, not an exception: nobody may be awaiting it
        closer, late = self._serve(conn, failure)
        if conn is not None:
            try:
                conn.close()
            except sqlite3.Error:
                pass
        # Only a caller on another thread can queue behind close(): the loop's callers see `closed` first.
        while True:
            try:
                late.append(self._queue.get_nowait()[1])
            except queue.Empty:
                break
        _post([*((fut, False, SqliteClosedError(f"{self.name} is closed")) for fut in late), (closer, True, None)])

    def _serve(
        self, conn: sqlite3.Connection | None, failure: SqliteOpenError | None
    ) -> tuple[asyncio.Future[Any], list[asyncio.Future[Any]]]:
        """Run jobs until close()'s marker; return its future and those of any jobs queued behind it."""
        while True:
            batch = [self._queue.get()]
            while len(batch) < MAX_BATCH:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = next((i for i, (fn, _) in enumerate(batch) if fn is None), None)
            jobs = batch if stop is None else batch[:stop]
            if conn is None:
                _post([(fut, False, failure) for _, fut in jobs])
            elif self.group_commit:
                self._deliver(self._run_group(conn, jobs))
            else:
                for fn, fut in jobs:
                    self._deliver([_run_job(conn, fn, fut)])
            if stop is not None:
                return batch[stop][1], [fut for _, fut in batch[stop + 1 :]]

    def _deliver(self, outcomes: list[_Outcome]) -> None:
        if self._database_error is not None:
            outcomes = [
                (fut, ok, value if ok or not isinstance(value, sqlite3.Error) else self._translate(value))
                for fut, ok, value in outcomes
            ]
        _post(outcomes)

    def _translate(self, exc: sqlite3.Error) -> Exception:
        assert self._database_error is not None
        translated = self._database_error(exc)
        translated.__cause__ = exc
        return translated

    def _run_group(self, conn: sqlite3.Connection, jobs: list[_Job]) -> list[_Outcome]:
        """Run the jobs in one transaction and return their outcomes once it committed.

        A savepoint costs a copy of every page its job writes, so the jobs first run without one. When a job fails,
        the transaction is rolled back; if it was the first job, that undid only its own writes and the rest go on
        in a new transaction, otherwise the jobs run again, each in its own savepoint.
        """
        done: list[_Outcome] = []  # outcomes already final: first jobs that failed alone
        pending = jobs
        try:
            while pending:
                conn.execute("BEGIN IMMEDIATE")
                outcomes = []
                for fn, fut in pending:
                    outcomes.append(_run_job(conn, fn, fut))
                    if not outcomes[-1][1]:
                        break
                    if not conn.in_transaction:  # SQLite rolled it back under a job that hid the error
                        raise _BatchBroken
                if outcomes[-1][1]:
                    conn.execute("COMMIT")
                    return done + outcomes
                _rollback(conn)
                if len(outcomes) == 1:
                    done.append(outcomes[0])
                    pending = pending[1:]
                    continue
                conn.execute("BEGIN IMMEDIATE")
                outcomes = [_run_in_savepoint(conn, fn, fut) for fn, fut in pending]
                conn.execute("COMMIT")
                return done + outcomes
            return done
        except (sqlite3.Error, _BatchBroken):
            _rollback(conn)
        for fn, fut in pending:  # the database failed the group: each job alone, so only its own caller sees it
            try:
                conn.execute("BEGIN IMMEDIATE")
                outcome = _run_job(conn, fn, fut)
                if outcome[1]:
                    conn.execute("COMMIT")
                else:
                    _rollback(conn)
            except sqlite3.Error as exc:
                _rollback(conn)
                outcome = (fut, False, exc)
            done.append(outcome)
        return done


def _run_job(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any] | None, fut: Any) -> _Outcome:
    assert fn is not None
    try:
        return (fut, True, fn(conn))
    except BaseException as exc:
        return (fut, False, exc)


def _run_in_savepoint(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], Any] | None, fut: Any) -> _Outcome:
    conn.execute("SAVEPOINT job")
    outcome = _run_job(conn, fn, fut)
    if not outcome[1]:
        if not conn.in_transaction:  # SQLite rolled the whole transaction back (disk full, I/O error)
            raise _BatchBroken
        try:
            conn.execute("ROLLBACK TO job")
        except sqlite3.Error:
            raise _BatchBroken from None
    conn.execute("RELEASE job")
    return outcome
