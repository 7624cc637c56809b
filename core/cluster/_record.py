"""What a worker's runs under one name note in its data directory (`cluster-<name>.json`): the partitions the last
run owned, so a restart takes them back at once, and the consumer resets of each partition's held message, so a
message that keeps ending its worker is not delivered again for ever."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TypedDict

__all__ = ["WorkerRecord"]


class _Noted(TypedDict):
    owned: list[int]
    resets: dict[str, list[int]]  # partition -> [stream sequence of the held message, resets of it so far]


class WorkerRecord:
    """The file `path`, read and written in a thread (each write replaces it whole)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._owned: list[int] | None = None  # as last noted by this run

    def _read(self) -> _Noted:
        try:
            record = json.loads(self.path.read_text())
        except (OSError, ValueError):
            record = None
        if not isinstance(record, dict):
            return {"owned": [], "resets": {}}
        return {"owned": list(record.get("owned", [])), "resets": dict(record.get("resets", {}))}

    def _write(self, record: _Noted) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(record))

    async def owned_before(self) -> set[int]:
        """The partitions the last run under this name noted as owned."""
        return set((await asyncio.to_thread(self._read))["owned"])

    async def note_owned(self, owned: list[int]) -> None:
        """Note the partitions owned now (written only when they changed)."""
        if owned != self._owned:
            self._owned = owned
            record = await asyncio.to_thread(self._read)
            record["owned"] = owned
            await asyncio.to_thread(self._write, record)

    async def count_reset(self, partition: int, seq: int, limit: int) -> int:
        """Count one more reset of `partition`'s held message (stream sequence `seq`) and return the count; past
        `limit` it is not noted, and the caller does not reset."""
        record = await asyncio.to_thread(self._read)
        done = record["resets"].get(str(partition), [0, 0])
        count = done[1] + 1 if done[0] == seq else 1
        if count <= limit:
            record["resets"][str(partition)] = [seq, count]
            await asyncio.to_thread(self._write, record)
        return count
