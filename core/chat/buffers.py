"""Per-session buffers of incoming messages waiting for their turn (the `buffer` strategy)."""

from __future__ import annotations

import time
from collections.abc import Callable

from core.chat.message_utils import KiraMessageEvent
from core.utils.log import logger

__all__ = ["SessionBuffers"]


class SessionBuffers:
    """Per-session lists of buffered message events. An empty buffer holds no memory; idle ones can be evicted,
    and at most `max_sessions` sessions hold a buffer (a new one evicts the least recently touched)."""

    def __init__(self, max_sessions: int | None = None, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_sessions = max_sessions
        self._now = clock
        self._buffers: dict[str, list[KiraMessageEvent]] = {}
        self._touched: dict[str, float] = {}  # in order of last touch, oldest first

    def append(self, event: KiraMessageEvent) -> int:
        """Add `event` to its session's buffer; returns the buffer's new size."""
        sid = event.sid
        buffer = self._buffers.get(sid)
        if buffer is None:
            if self.max_sessions is not None and len(self._buffers) >= self.max_sessions:
                oldest = next(iter(self._touched))
                logger.warning(
                    "too many buffered sessions (%d): dropped the buffer of %s (%d messages)",
                    self.max_sessions,
                    oldest,
                    len(self.drain(oldest)),
                )
            buffer = self._buffers[sid] = []
        buffer.append(event)
        self._touched.pop(sid, None)
        self._touched[sid] = self._now()
        return len(buffer)

    def remove(self, event: KiraMessageEvent) -> None:
        """Take one event back out of its session's buffer."""
        buffer = self._buffers.get(event.sid)
        if buffer is not None and event in buffer:
            buffer.remove(event)
            if not buffer:
                self.drain(event.sid)

    def drain(self, sid: str) -> list[KiraMessageEvent]:
        """Remove and return everything buffered for `sid`."""
        self._touched.pop(sid, None)
        return self._buffers.pop(sid, [])

    def peek(self, sid: str) -> list[KiraMessageEvent]:
        """A copy of what `sid` has buffered, oldest first; the buffer is not touched."""
        return list(self._buffers.get(sid, ()))

    def size(self, sid: str) -> int:
        """How many messages `sid` has buffered."""
        buffer = self._buffers.get(sid)
        return len(buffer) if buffer else 0

    def sessions(self) -> list[str]:
        """Session ids with buffered messages."""
        return list(self._buffers)

    def evict_idle(self, max_idle: float) -> list[str]:
        """Drop buffers untouched for `max_idle` seconds (their messages are discarded, with a log line)."""
        now = self._now()
        stale = [sid for sid, at in self._touched.items() if now - at >= max_idle]
        for sid in stale:
            dropped = self.drain(sid)
            logger.info("evicted idle buffer of %s (%d messages dropped)", sid, len(dropped))
        return stale

    def __len__(self) -> int:
        return len(self._buffers)
