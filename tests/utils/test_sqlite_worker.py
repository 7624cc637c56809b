"""The SQLite worker under the history, the plugin store and database, and the tool registry: one thread, jobs in
order, group commit where a failing job costs only itself, cancelled callers, and closing with work queued."""

import asyncio
import sqlite3
import threading
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from core.utils.sqlite import SqliteClosedError, SqliteOpenError, SqliteWorker

pytestmark = pytest.mark.anyio

both_modes = pytest.mark.parametrize("group_commit", [False, True], ids=["own-transactions", "group-commit"])


def make_table(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS notes (title TEXT PRIMARY KEY)")


def insert(title: str):
    def job(conn: sqlite3.Connection) -> None:
        conn.execute("INSERT INTO notes VALUES (?)", (title,))
        if conn.isolation_level is not None:  # the job owns its transaction unless the worker groups the jobs
            conn.commit()

    return job


def titles(conn: sqlite3.Connection) -> list[str]:
    return [row[0] for row in conn.execute("SELECT title FROM notes ORDER BY rowid")]


def titles_on_disk(path: Path) -> list[str]:
    """What another connection sees: only committed rows."""
    with closing(sqlite3.connect(path)) as conn:
        return titles(conn)


async def hold(worker: SqliteWorker) -> tuple[threading.Event, asyncio.Future]:
    """Occupy the worker's thread with a job until the returned event is set, so the next jobs queue behind it."""
    running, release = threading.Event(), threading.Event()

    def job(conn: sqlite3.Connection) -> None:
        running.set()
        release.wait(10)

    held = asyncio.ensure_future(worker.run(job))
    await anyio.to_thread.run_sync(running.wait, 10)  # the loop keeps running while the thread works
    return release, held


async def queued(*jobs) -> list[asyncio.Future]:
    """Start a task per `worker.run(...)` and let each put its job on the queue."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    await asyncio.sleep(0)
    return tasks


@both_modes
async def test_jobs_run_in_order_on_one_thread_off_the_loop(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    threads = []

    def job(title):
        def run(conn):
            threads.append(threading.get_ident())
            insert(title)(conn)

        return run

    await asyncio.gather(*(worker.run(job(f"n{i}")) for i in range(20)))
    assert await worker.run(titles) == [f"n{i}" for i in range(20)]
    await worker.close()
    assert len(set(threads)) == 1 and threads[0] != threading.get_ident()
    assert titles_on_disk(tmp_path / "w.db") == [f"n{i}" for i in range(20)]


async def test_open_sets_the_database_up_once_in_wal_mode(tmp_path):
    calls = []

    def setup(conn):
        calls.append("setup")
        make_table(conn)

    path = tmp_path / "nested" / "w.db"
    worker = SqliteWorker(path, name="notes", setup=setup)
    await worker.open()
    await worker.open()  # already open: nothing more to do
    assert titles_on_disk(path) == [], "the table exists for other connections: setup was committed"
    await worker.run(insert("a"))
    await worker.close()
    assert calls == ["setup"]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_in_a_group_commit_a_failing_job_loses_only_its_own_writes(tmp_path):
    statements: list[str] = []

    def setup(conn):
        make_table(conn)
        conn.set_trace_callback(statements.append)

    def write_then_fail(conn):
        conn.execute("INSERT INTO notes VALUES ('half-done')")
        raise ValueError("changed my mind")

    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=setup, group_commit=True)
    await worker.open()
    release, held = await hold(worker)
    tasks = await queued(worker.run(insert("a")), worker.run(write_then_fail), worker.run(insert("b")),
                         worker.run(insert("a")), worker.run(insert("c")))
    release.set()
    await held
    results = await asyncio.gather(*tasks, return_exceptions=True)

    assert results[0] is None and results[2] is None and results[4] is None
    assert isinstance(results[1], ValueError)
    assert isinstance(results[3], sqlite3.IntegrityError), "the duplicate 'a' fails on its own"
    assert titles_on_disk(tmp_path / "w.db") == ["a", "b", "c"], "committed when their callers got the result"
    assert statements.count("BEGIN IMMEDIATE") == 2, "the held job's transaction, then one for the five"
    assert "ROLLBACK" not in statements, "each failure was undone at its savepoint, not by running jobs again"
    await worker.close()


async def test_when_the_database_drops_a_groups_transaction_each_job_runs_again_alone(tmp_path):
    def lose_the_transaction(conn):
        conn.execute("ROLLBACK")  # what SQLite itself does on a full disk or an I/O error
        raise sqlite3.OperationalError("disk I/O error")

    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=True)
    await worker.open()
    release, held = await hold(worker)
    tasks = await queued(worker.run(insert("a")), worker.run(lose_the_transaction), worker.run(insert("b")))
    release.set()
    await held
    results = await asyncio.gather(*tasks, return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sqlite3.Error)
    assert titles_on_disk(tmp_path / "w.db") == ["a", "b"], "'a' was lost with the transaction, then redone"
    await worker.close()


@both_modes
async def test_a_cancelled_callers_job_still_runs(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    release, held = await hold(worker)
    [task] = await queued(worker.run(insert("cancelled")))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await held
    assert await worker.run(titles) == ["cancelled"]
    await worker.run(insert("after"))
    assert await worker.run(titles) == ["cancelled", "after"], "the worker goes on as before"
    await worker.close()


@both_modes
async def test_close_lets_the_queued_jobs_finish_first(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    release, held = await hold(worker)
    tasks = await queued(*(worker.run(insert(f"n{i}")) for i in range(5)))
    [closing_task] = await queued(worker.close())
    assert worker.closed and not closing_task.done()
    release.set()
    await closing_task
    assert all(task.done() for task in tasks), "close() returned after the jobs queued before it"
    assert [task.result() for task in tasks] == [None] * 5
    assert titles_on_disk(tmp_path / "w.db") == [f"n{i}" for i in range(5)]
    await held


@both_modes
async def test_a_closed_worker_refuses_work(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    await worker.run(insert("a"))
    await worker.close()
    with pytest.raises(SqliteClosedError, match="notes is closed"):
        await worker.run(titles)
    with pytest.raises(SqliteClosedError):
        await worker.open()
    await worker.close()  # closing twice is harmless
    assert titles_on_disk(tmp_path / "w.db") == ["a"]


async def test_a_worker_closed_before_any_job_never_starts_a_thread(tmp_path):
    before = threading.active_count()
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table)
    await worker.close()
    with pytest.raises(SqliteClosedError):
        await worker.run(titles)
    assert threading.active_count() == before and not (tmp_path / "w.db").exists()


async def test_a_file_that_is_not_a_database_fails_open_and_every_job(tmp_path):
    path = tmp_path / "w.db"
    path.write_bytes(b"this is not sqlite" * 100)
    worker = SqliteWorker(path, name="notes", setup=make_table)
    with pytest.raises(SqliteOpenError, match=r"cannot open notes at .*w\.db") as failed:
        await worker.run(titles)
    assert isinstance(failed.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(SqliteOpenError):
        await worker.open()
    await worker.close()
    assert path.read_bytes() == b"this is not sqlite" * 100, "the file is left as it was"


async def test_synchronous_must_be_a_known_level(tmp_path):
    with pytest.raises(ValueError, match="synchronous"):
        SqliteWorker(tmp_path / "w.db", name="notes", synchronous="OFF")
