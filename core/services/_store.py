"""A plugin's key-value store (`self.store`): JSON values by string key in the plugin's own SQLite file.

Every method returns a `Result`: `Ok(value)` or `Err(SdkError)`; a write is committed when its `Ok` is returned.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path
from typing import Any, Protocol

from core.services._result import Err, Ok, Result, SdkError
from core.services._sqlite import storage_error
from core.utils.sqlite import SqliteWorker, SqliteWorkerError

__all__ = ["PluginStore", "PluginStoreLike"]

_MISSING = object()


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute("CREATE TABLE IF NOT EXISTS kv (key TEXT PRIMARY KEY, value TEXT NOT NULL, updated_at REAL NOT NULL)")


def _check_key(key: object) -> str | None:
    if not isinstance(key, str) or not key:
        return f"store keys are non-empty strings, not {key!r}"
    return None


class PluginStoreLike(Protocol):
    """What `self.store` offers a plugin: `PluginStore` (SQLite, the default) and a cluster worker's shared
    store (`core.cluster`) both provide it; every method returns a `Result`."""

    async def get(self, key: str, default: Any = None) -> Result[Any, SdkError]:
        """`Ok(value)` for `key`, or `Ok(default)`."""
        ...

    async def set(self, key: str, value: Any) -> Result[None, SdkError]:
        """Store `value` under `key`."""
        ...

    async def delete(self, key: str) -> Result[bool, SdkError]:
        """Remove `key`; `Ok(True)` when it was set."""
        ...

    async def exists(self, key: str) -> Result[bool, SdkError]:
        """`Ok(True)` when `key` is set."""
        ...

    async def keys(self, prefix: str = "") -> Result[list[str], SdkError]:
        """`Ok` of the keys starting with `prefix`, sorted."""
        ...

    async def clear(self) -> Result[int, SdkError]:
        """Remove every key; `Ok` of how many there were."""
        ...

    async def close(self) -> None:
        """Release the store (the plugin stopped)."""


class PluginStore:
    """Small persistent key-value state of one plugin. Values are anything `json.dumps` accepts."""

    def __init__(self, path: Path, *, plugin_id: str) -> None:
        self.path = Path(path)
        self.plugin_id = plugin_id
        self._worker = SqliteWorker(self.path, name=f"store of plugin {plugin_id!r}", setup=_setup)

    async def _run(self, fn: Any) -> Result[Any, SdkError]:
        try:
            return Ok(await self._worker.submit(fn))
        except SqliteWorkerError as exc:
            return Err(storage_error(exc))
        except sqlite3.Error as exc:
            return Err(SdkError(f"store of plugin {self.plugin_id!r} failed: {exc}", code="storage_error"))

    async def get(self, key: str, default: Any = None) -> Result[Any, SdkError]:
        """`Ok(value)` for `key`, or `Ok(default)` when it is not set."""
        if (problem := _check_key(key)) is not None:
            return Err(SdkError(problem, code="invalid_argument"))

        def job(conn: sqlite3.Connection) -> Any:
            row = conn.execute("SELECT value FROM kv WHERE key = ?", (key,)).fetchone()
            return _MISSING if row is None else json.loads(row[0])

        result = await self._run(job)
        if isinstance(result, Ok) and result.value is _MISSING:
            return Ok(default)
        return result

    async def set(self, key: str, value: Any) -> Result[None, SdkError]:
        """Store `value` under `key` (replacing what was there); `Ok(None)` once committed."""
        if (problem := _check_key(key)) is not None:
            return Err(SdkError(problem, code="invalid_argument"))
        try:
            text = json.dumps(value, ensure_ascii=False)
        except (TypeError, ValueError) as exc:
            return Err(
                SdkError(f"the value for store key {key!r} is not JSON-serialisable: {exc}", code="invalid_argument")
            )

        def job(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute(
                    "INSERT INTO kv (key, value, updated_at) VALUES (?, ?, ?) "
                    "ON CONFLICT(key) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at",
                    (key, text, time.time()),
                )

        return await self._run(job)

    async def delete(self, key: str) -> Result[bool, SdkError]:
        """Remove `key`; `Ok(True)` when it was set."""
        if (problem := _check_key(key)) is not None:
            return Err(SdkError(problem, code="invalid_argument"))

        def job(conn: sqlite3.Connection) -> bool:
            with conn:
                return conn.execute("DELETE FROM kv WHERE key = ?", (key,)).rowcount > 0

        return await self._run(job)

    async def exists(self, key: str) -> Result[bool, SdkError]:
        """`Ok(True)` when `key` is set."""
        result = await self.get(key, _MISSING)
        return Ok(result.value is not _MISSING) if isinstance(result, Ok) else result

    async def keys(self, prefix: str = "") -> Result[list[str], SdkError]:
        """`Ok` of the keys starting with `prefix`, sorted."""

        def job(conn: sqlite3.Connection) -> list[str]:
            rows = conn.execute("SELECT key FROM kv ORDER BY key").fetchall()
            return [r[0] for r in rows if r[0].startswith(prefix)]

        return await self._run(job)

    async def clear(self) -> Result[int, SdkError]:
        """Remove every key; `Ok` of how many there were."""

        def job(conn: sqlite3.Connection) -> int:
            with conn:
                return conn.execute("DELETE FROM kv").rowcount

        return await self._run(job)

    async def close(self) -> None:
        """Finish pending writes and close the file (the plugin stopped)."""
        await self._worker.close()
