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

    held = worker.submit(job)
    await anyio.to_thread.run_sync(running.wait, 10)  # the loop keeps running while the thread works
    return release, held


async def started(coro) -> asyncio.Task:
    """Run `coro` as a task up to its first wait."""
    task = asyncio.ensure_future(coro)
    await asyncio.sleep(0)
    return task


@both_modes
async def test_jobs_run_in_order_on_one_thread_off_the_loop(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    threads = []

    def job(title):
        def run(conn):
            threads.append(threading.get_ident())
            insert(title)(conn)

        return run

    await asyncio.gather(*(worker.submit(job(f"n{i}")) for i in range(20)))
    assert await worker.submit(titles) == [f"n{i}" for i in range(20)]
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
    await worker.submit(insert("a"))
    await worker.close()
    assert calls == ["setup"]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("order", [[1, 0, 2, 3, 4], [0, 1, 2, 3, 4]], ids=["failing-first", "failing-second"])
async def test_in_a_group_commit_a_failing_job_loses_only_its_own_writes(tmp_path, order):
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
    jobs = [insert("a"), write_then_fail, insert("b"), insert("a"), insert("c")]
    futures = [worker.submit(jobs[i]) for i in order]
    release.set()
    await held
    results = dict(zip(order, await asyncio.gather(*futures, return_exceptions=True), strict=True))

    assert results[0] is None and results[2] is None and results[4] is None
    assert isinstance(results[1], ValueError)
    assert isinstance(results[3], sqlite3.IntegrityError), "the duplicate 'a' fails on its own"
    assert sorted(titles_on_disk(tmp_path / "w.db")) == ["a", "b", "c"], "committed when their callers got it"
    assert statements.count("COMMIT") == 2, "the held job's transaction, then one for the five"
    await worker.close()


async def test_when_the_database_drops_a_groups_transaction_each_job_runs_again_alone(tmp_path):
    def lose_the_transaction(conn):
        conn.execute("ROLLBACK")  # what SQLite itself does on a full disk or an I/O error
        raise sqlite3.OperationalError("disk I/O error")

    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=True)
    await worker.open()
    release, held = await hold(worker)
    futures = [worker.submit(insert("a")), worker.submit(lose_the_transaction), worker.submit(insert("b"))]
    release.set()
    await held
    results = await asyncio.gather(*futures, return_exceptions=True)
    assert results[0] is None and results[2] is None
    assert isinstance(results[1], sqlite3.Error)
    assert titles_on_disk(tmp_path / "w.db") == ["a", "b"], "'a' was lost with the transaction, then redone"
    await worker.close()


@both_modes
async def test_a_cancelled_callers_job_still_runs(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    release, held = await hold(worker)

    async def caller():
        await worker.submit(insert("cancelled"))

    task = await started(caller())
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    release.set()
    await held
    assert await worker.submit(titles) == ["cancelled"]
    await worker.submit(insert("after"))
    assert await worker.submit(titles) == ["cancelled", "after"], "the worker goes on as before"
    await worker.close()


@both_modes
async def test_close_lets_the_queued_jobs_finish_first(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    release, held = await hold(worker)
    futures = [worker.submit(insert(f"n{i}")) for i in range(5)]
    closing_task = await started(worker.close())
    assert worker.closed and not closing_task.done()
    with pytest.raises(SqliteClosedError):
        worker.submit(titles)
    release.set()
    await closing_task
    assert all(future.done() for future in futures), "close() returned after the jobs queued before it"
    assert [future.result() for future in futures] == [None] * 5
    assert titles_on_disk(tmp_path / "w.db") == [f"n{i}" for i in range(5)]
    await held


@both_modes
async def test_a_closed_worker_refuses_work(tmp_path, group_commit):
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=group_commit)
    await worker.submit(insert("a"))
    await worker.close()
    with pytest.raises(SqliteClosedError, match="notes is closed"):
        await worker.submit(titles)
    with pytest.raises(SqliteClosedError):
        await worker.open()
    await worker.close()  # closing twice is harmless
    assert titles_on_disk(tmp_path / "w.db") == ["a"]


async def test_a_worker_closed_before_any_job_never_starts_a_thread(tmp_path):
    before = threading.active_count()
    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table)
    await worker.close()
    with pytest.raises(SqliteClosedError):
        await worker.submit(titles)
    assert threading.active_count() == before and not (tmp_path / "w.db").exists()


async def test_a_file_that_is_not_a_database_fails_open_and_every_job(tmp_path):
    path = tmp_path / "w.db"
    path.write_bytes(b"this is not sqlite" * 100)
    worker = SqliteWorker(path, name="notes", setup=make_table)
    with pytest.raises(SqliteOpenError, match=r"cannot open notes at .*w\.db") as failed:
        await worker.submit(titles)
    assert isinstance(failed.value.__cause__, sqlite3.DatabaseError)
    with pytest.raises(SqliteOpenError):
        await worker.open()
    await worker.close()
    assert path.read_bytes() == b"this is not sqlite" * 100, "the file is left as it was"


async def test_synchronous_must_be_a_known_level(tmp_path):
    with pytest.raises(ValueError, match="synchronous"):
        SqliteWorker(tmp_path / "w.db", name="notes", synchronous="OFF")


class NotesError(Exception):
    pass


@both_modes
async def test_database_errors_reach_the_caller_as_the_owners_error(tmp_path, group_commit):
    worker = SqliteWorker(
        tmp_path / "w.db",
        name="notes",
        setup=make_table,
        group_commit=group_commit,
        database_error=lambda exc: NotesError(f"notes failed: {exc}"),
    )

    def not_sql(conn):
        raise LookupError("no such note")

    with pytest.raises(NotesError, match="notes failed: no such table: missing") as failed:
        await worker.submit(lambda conn: conn.execute("SELECT * FROM missing"))
    assert isinstance(failed.value.__cause__, sqlite3.OperationalError)
    with pytest.raises(LookupError):  # only database errors are translated
        await worker.submit(not_sql)
    await worker.close()


async def test_a_job_that_hides_a_lost_transaction_does_not_leave_the_others_uncommitted(tmp_path):
    def lose_the_transaction_quietly(conn):
        conn.execute("ROLLBACK")  # as if SQLite had rolled back on an I/O error the job caught and ignored

    worker = SqliteWorker(tmp_path / "w.db", name="notes", setup=make_table, group_commit=True)
    await worker.open()
    release, held = await hold(worker)
    futures = [worker.submit(insert("a")), worker.submit(lose_the_transaction_quietly), worker.submit(insert("b"))]
    release.set()
    await held
    await asyncio.gather(*futures, return_exceptions=True)
    assert titles_on_disk(tmp_path / "w.db") == ["a", "b"], "each once: none ran outside a transaction"
    await worker.close()
