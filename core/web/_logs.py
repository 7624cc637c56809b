"""The console's view of the logs: a `logging.Handler` that keeps the newest records and streams new ones to
every open log page (server-sent events), filterable by plugin, level and trace id."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import asdict, dataclass

__all__ = ["LogEntry", "LogHub", "LogFilter"]

_PLUGIN_PREFIX = "hookchat.plugin."


@dataclass(frozen=True, slots=True)
class LogEntry:
    """One log line as the console shows it."""

    seq: int
    time: float
    level: str
    levelno: int
    logger: str
    plugin_id: str
    trace_id: str
    message: str

    def to_dict(self) -> dict[str, object]:
        """The entry as JSON data."""
        return asdict(self)


@dataclass(frozen=True, slots=True)
class LogFilter:
    """Which entries a reader wants: a plugin id, a minimum level name, a trace id (empty: any)."""

    plugin_id: str = ""
    level: str = ""
    trace_id: str = ""

    def __call__(self, entry: LogEntry) -> bool:
        if self.plugin_id and entry.plugin_id != self.plugin_id:
            return False
        if self.level and entry.levelno < _level_number(self.level):
            return False
        return not self.trace_id or entry.trace_id == self.trace_id


class LogHub(logging.Handler):
    """Keeps the last `size` records of the `hookchat` loggers and hands new ones to subscribers.

    Records may come from any thread (watchdogs, worker threads); subscribers live on the event loop `attach`
    was called on. A subscriber that cannot keep up loses the oldest lines it has not read, never blocks logging.
    """

    def __init__(self, size: int = 2_000, logger_name: str = "hookchat") -> None:
        super().__init__(logging.DEBUG)
        self.logger_name = logger_name
        self._entries: deque[LogEntry] = deque(maxlen=size)
        self._lock = threading.Lock()
        self._seq = 0
        self._subscribers: set[asyncio.Queue[LogEntry]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._previous_level = logging.NOTSET

    def attach(self, level: int = logging.INFO) -> None:
        """Start collecting the `hookchat` loggers' records from `level` up (the logger is opened to that level
        while attached; handlers elsewhere keep their own levels). Call on the event loop that serves readers."""
        self._loop = asyncio.get_running_loop()
        target = logging.getLogger(self.logger_name)
        self._previous_level = target.level
        if target.getEffectiveLevel() > level:
            target.setLevel(level)
        target.addHandler(self)

    def detach(self) -> None:
        """Stop collecting (and give the logger back its level)."""
        target = logging.getLogger(self.logger_name)
        target.removeHandler(self)
        if self._loop is not None:
            target.setLevel(self._previous_level)
        self._loop = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[0] is not None:
                message += "\n" + _FORMATTER.formatException(record.exc_info)
        except Exception:
            message = str(record.msg)
        name = record.name
        plugin_id = getattr(record, "plugin_id", "") or (
            name[len(_PLUGIN_PREFIX) :].split(".", 1)[0] if name.startswith(_PLUGIN_PREFIX) else ""
        )
        with self._lock:
            self._seq += 1
            entry = LogEntry(
                self._seq,
                record.created,
                record.levelname,
                record.levelno,
                name,
                plugin_id,
                getattr(record, "trace_id", "") or "",
                message,
            )
            self._entries.append(entry)
        loop = self._loop
        if loop is None or not self._subscribers:
            return
        try:
            if _running_loop() is loop:
                self._publish(entry)
            else:
                loop.call_soon_threadsafe(self._publish, entry)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _publish(self, entry: LogEntry) -> None:
        for queue in list(self._subscribers):
            if queue.full():
                queue.get_nowait()
            queue.put_nowait(entry)

    def recent(self, wanted: LogFilter = LogFilter(), limit: int = 500) -> list[LogEntry]:
        """The newest kept entries that match, oldest first."""
        with self._lock:
            entries = list(self._entries)
        return [e for e in entries if wanted(e)][-limit:]

    async def follow(self, wanted: LogFilter = LogFilter(), backlog: int = 200) -> AsyncIterator[LogEntry]:
        """The matching backlog, then every new matching entry as it is logged (until the reader stops)."""
        queue: asyncio.Queue[LogEntry] = asyncio.Queue(maxsize=1_000)
        self._subscribers.add(queue)
        try:
            last = 0
            for entry in self.recent(wanted, backlog):
                last = entry.seq
                yield entry
            while True:
                entry = await queue.get()
                if entry.seq > last and wanted(entry):
                    yield entry
        finally:
            self._subscribers.discard(queue)


_FORMATTER = logging.Formatter()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _level_number(name: str) -> int:
    number = logging.getLevelName(name.upper())
    return number if isinstance(number, int) else 0
