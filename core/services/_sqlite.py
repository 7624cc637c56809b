"""What a plugin sees when its store or database cannot run a query for a reason of the worker's own: the worker
(`core.utils.sqlite.SqliteWorker`) raises its own errors, and these turn them into the SDK's.
"""

from __future__ import annotations

from core.services._result import SdkError
from core.utils.sqlite import SqliteClosedError, SqliteWorker, SqliteWorkerError

__all__ = ["SqliteWorker", "StorageClosedError", "storage_error"]  # SqliteWorker: `core.services` exports it


class StorageClosedError(SdkError):
    """The store or database was closed (its plugin stopped); it cannot run queries any more."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="storage_closed")


def storage_error(exc: SqliteWorkerError) -> SdkError:
    """The SDK error for a worker error: `StorageClosedError` once closed, else `storage_unavailable` (it never
    opened; the message says why)."""
    if isinstance(exc, SqliteClosedError):
        return StorageClosedError(f"{exc} (its plugin stopped)")
    return SdkError(str(exc), code="storage_unavailable")
