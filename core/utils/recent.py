"""`Recent`: a mapping that keeps only its most recently written entries, so what the adapter remembers per
session, message or group stays bounded however many a peer sends."""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

__all__ = ["Recent"]

K = TypeVar("K")
V = TypeVar("V")


class Recent(OrderedDict[K, V], Generic[K, V]):
    """An `OrderedDict` of at most `limit` entries: `remember` writes one and forgets the least recently written
    beyond the limit. Reading does not refresh an entry."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def remember(self, key: K, value: V) -> None:
        """Write `key` as the most recent entry, forgetting the oldest when there are more than `limit`."""
        self[key] = value
        self.move_to_end(key)
        if len(self) > self.limit:
            self.popitem(last=False)
