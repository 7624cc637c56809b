"""A plugin's SQLite database (`self.db`): `async with unwrap(await self.db.session()) as session:` gives a session
whose `execute`/`commit` run on the database's worker thread. Sessions of one plugin run one at a time.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from core.services._result import Err, Ok, Result, SdkError
from core.services._sqlite import storage_error
from core.utils.sqlite import SqliteWorker, SqliteWorkerError

__all__ = ["PluginDatabase", "DbSession", "DbRows"]

Params = Sequence[Any] | Mapping[str, Any]


class DbRows:
    """What one statement returned: every row (fetched on the worker thread), `rowcount` and `lastrowid`."""

    def __init__(self, rows: list[tuple[Any, ...]], columns: list[str], rowcount: int, lastrowid: int | None):
        self.rows = rows
        self.columns = columns
        self.rowcount = rowcount
        self.lastrowid = lastrowid

    def fetchall(self) -> list[tuple[Any, ...]]:
        """Every row, as tuples."""
        return list(self.rows)

    def fetchone(self) -> tuple[Any, ...] | None:
        """The first row, or None."""
        return self.rows[0] if self.rows else None

    def scalar(self) -> Any:
        """The first column of the first row, or None."""
        return self.rows[0][0] if self.rows and self.rows[0] else None

    def mappings(self) -> list[dict[str, Any]]:
        """Every row as a dict of column name to value."""
        return [dict(zip(self.columns, row, strict=True)) for row in self.rows]

    def __iter__(self) -> Iterator[tuple[Any, ...]]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)


def _statement(sql: str, params: Params | None):
    def job(conn: sqlite3.Connection) -> DbRows:
        cur = conn.execute(sql, params if params is not None else ())
        rows = cur.fetchall()
        columns = [d[0] for d in cur.description or ()]
        return DbRows(rows, columns, cur.rowcount, cur.lastrowid)

    return job


class DbSession:
    """One unit of work on the plugin's database. Use it as `async with`: entering waits for the other sessions
    of this plugin to finish; leaving rolls back whatever was not committed."""

    def __init__(self, db: PluginDatabase) -> None:
        self._db = db
        self._entered = False

    async def __aenter__(self) -> DbSession:
        await self._db._lock().acquire()
        self._entered = True
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        try:
            await self._db._worker.submit(lambda conn: conn.rollback() if conn.in_transaction else None)
        except SqliteWorkerError:  # the plugin stopped under the session: nothing left to roll back
            pass
        finally:
            self._entered = False
            self._db._lock().release()

    async def _run(self, job: Any) -> Any:
        if not self._entered:
            raise SdkError(
                "use the session as 'async with unwrap(await self.db.session()) as session:'", code="session_not_open"
            )
        try:
            return await self._db._worker.submit(job)
        except SqliteWorkerError as exc:
            raise storage_error(exc) from exc
        except sqlite3.Error as exc:
            raise SdkError(f"database of plugin {self._db.plugin_id!r}: {exc}", code="database_error") from exc

    async def execute(self, sql: str, params: Params | None = None) -> DbRows:
        """Run one SQL statement with `?` or `:name` parameters; returns its rows. Raises `SdkError` on failure."""
        return await self._run(_statement(sql, params))

    async def executemany(self, sql: str, seq_of_params: Iterable[Params]) -> int:
        """Run one statement for each parameter set; returns the total row count."""
        batch = list(seq_of_params)
        return await self._run(lambda conn: conn.executemany(sql, batch).rowcount)

    async def executescript(self, script: str) -> None:
        """Run several `;`-separated statements (commits first, as sqlite3 does)."""
        await self._run(lambda conn: conn.executescript(script))

    async def commit(self) -> None:
        """Commit the session's changes."""
        await self._run(lambda conn: conn.commit())

    async def rollback(self) -> None:
        """Undo the session's uncommitted changes."""
        await self._run(lambda conn: conn.rollback())


class PluginDatabase:
    """A plugin's own SQLite file. `await db.session()` is `Ok(DbSession)` (or `Err` once the plugin stopped)."""

    def __init__(self, path: Path, *, plugin_id: str) -> None:
        self.path = Path(path)
        self.plugin_id = plugin_id
        self._worker = SqliteWorker(self.path, name=f"database of plugin {plugin_id!r}")
        self._session_lock: asyncio.Lock | None = None

    def _lock(self) -> asyncio.Lock:
        if self._session_lock is None:
            self._session_lock = asyncio.Lock()
        return self._session_lock

    async def session(self) -> Result[DbSession, SdkError]:
        """A new session; enter it with `async with`."""
        if self._worker.closed:
            return Err(SdkError(f"the database of plugin {self.plugin_id!r} is closed", code="storage_closed"))
        return Ok(DbSession(self))

    async def close(self) -> None:
        """Close the file (the plugin stopped); queued statements finish first."""
        await self._worker.close()
