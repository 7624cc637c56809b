"""The gateway's way into JetStream: incoming messages published at once while the server answers (many in flight,
one at a time per session, so each session keeps its order), and held in a bounded, durable spool (SQLite in the
gateway's data directory) while it does not, to be published from there, oldest first, when it is back."""

from __future__ import annotations

import asyncio
import sqlite3
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import nats.errors
import nats.js.errors

from core.cluster._bus import NATS_ERRORS, Bus
from core.utils.log import logger
from core.utils.sqlite import SqliteWorker

__all__ = ["Outgoing", "Spool", "Outbox", "REFUSED"]

#: What the stream refuses for good (too large, malformed): retrying cannot help, so the sender is told.
REFUSED = (nats.errors.MaxPayloadError, nats.js.errors.BadRequestError)

_WINDOW = 1_000  # messages published and not yet acknowledged by the stream, across sessions
_DRAIN_BATCH = 512  # spooled messages read and published together
_PAUSE_MIN, _PAUSE_MAX = 0.05, 1.0  # seconds between tries while the server does not take the spool's messages


@dataclass
class Outgoing:
    """One message on its way to the stream: its session (for order), subject, JetStream id and payload;
    `seq` is its row in the spool once it is there."""

    sid: str
    subject: str
    msg_id: str
    payload: bytes
    seq: int | None = None


def _setup(conn: sqlite3.Connection) -> None:
    conn.execute(
        "CREATE TABLE IF NOT EXISTS spool (seq INTEGER PRIMARY KEY AUTOINCREMENT, sid TEXT NOT NULL, "
        "subject TEXT NOT NULL, msg_id TEXT NOT NULL, payload BLOB NOT NULL)"
    )


class Spool:
    """A first-in first-out table of `Outgoing` messages in SQLite (`path`), through the project's `SqliteWorker`.

    `add` and `remove` are queued synchronously, in call order, so what is added first gets the lower `seq`;
    `count` and `size` follow every call at once (the rows land at the next group commit). `full` says when
    `max_messages` or `max_bytes` is reached; `add` itself never refuses (the caller waits for room)."""

    def __init__(self, path: Path, *, max_messages: int, max_bytes: int) -> None:
        self.path = path
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.count = 0
        self.size = 0
        self._db = SqliteWorker(path, name=f"gateway spool {path}", setup=_setup, group_commit=True)

    async def open(self) -> None:
        """Open the table and count what an earlier run left in it."""
        await self._db.open()
        self.count, self.size = await self._db.submit(
            lambda c: c.execute("SELECT COUNT(*), COALESCE(SUM(LENGTH(payload)), 0) FROM spool").fetchone()
        )

    @property
    def full(self) -> bool:
        """Whether the spool holds `max_messages` or `max_bytes`."""
        return self.count >= self.max_messages or self.size >= self.max_bytes

    def add(self, items: list[Outgoing]) -> asyncio.Future[None]:
        """Append `items` in their order; the future resolves once they are committed."""
        rows = [(i.sid, i.subject, i.msg_id, i.payload) for i in items]
        self.count += len(rows)
        self.size += sum(len(i.payload) for i in items)
        return self._db.submit(
            lambda c: (
                c.executemany("INSERT INTO spool (sid, subject, msg_id, payload) VALUES (?, ?, ?, ?)", rows) and None
            )
        )

    async def oldest(self, limit: int) -> list[Outgoing]:
        """The first `limit` messages, oldest first."""
        rows = await self._db.submit(
            lambda c: c.execute(
                "SELECT seq, sid, subject, msg_id, payload FROM spool ORDER BY seq LIMIT ?", (limit,)
            ).fetchall()
        )
        return [Outgoing(sid, subject, msg_id, bytes(payload), seq) for seq, sid, subject, msg_id, payload in rows]

    def remove(self, items: list[Outgoing]) -> asyncio.Future[None]:
        """Delete `items` (read by `oldest`)."""
        seqs = [(i.seq,) for i in items]
        self.count -= len(seqs)
        self.size -= sum(len(i.payload) for i in items)
        return self._db.submit(lambda c: c.executemany("DELETE FROM spool WHERE seq = ?", seqs) and None)

    async def close(self) -> None:
        """Commit what is queued and close the database."""
        await self._db.close()


class Outbox:
    """Publishes the gateway's incoming messages to JetStream, each session's in order, and never loses one it took.

    While the server answers, `put` starts a publish and returns: up to `_WINDOW` messages are in flight at once,
    each session's one after the other (a session's next message is published once the stream holds the one
    before). When a publish fails or times out (`timeout`), or the connection drops, the outbox switches to the
    spool: what is in flight or waiting goes there, in order, and so does every new message, until the spool is
    published (oldest first, sessions side by side, each in order) and empty; then it publishes directly again.
    `put` waits (back-pressure) while the window or the spool is full. A message the stream refuses for good
    (`REFUSED`) is handed to `refused` with the reason, and not retried."""

    def __init__(
        self, bus: Bus, spool: Spool, *, timeout: float, refused: Callable[[Outgoing, str], Awaitable[None]]
    ) -> None:
        self.bus = bus
        self.spool = spool
        self.timeout = timeout
        self._refused = refused
        self._direct = True  # False while the spool has messages (or a failure is being wound down)
        self._lanes: dict[str, tuple[deque[Outgoing], asyncio.Task[None]]] = {}  # session -> waiting, publisher
        self._in_flight = 0  # messages in lanes
        self._room = asyncio.Event()
        self._wake = asyncio.Event()
        self._drainer: asyncio.Task[None] | None = None
        self._spooling: set[asyncio.Future[None]] = set()

    @property
    def pending(self) -> int:
        """Messages taken and not yet held by the stream (in flight, waiting, or spooled)."""
        return self._in_flight + self.spool.count

    async def start(self) -> None:
        """Open the spool; what an earlier run left there is published first."""
        await self.spool.open()
        if self.spool.count:
            logger.warning(
                "cluster: %s: %d message(s) spooled by an earlier run are published first",
                self.bus.name,
                self.spool.count,
            )
            self._direct = False
        self._drainer = asyncio.get_running_loop().create_task(self._drain(), name="hookchat:gateway:spool")
        self._wake.set()

    async def aclose(self, grace: float = 5.0) -> None:
        """Let the publishes in flight finish for up to `grace` seconds, spool the rest, and close the spool."""
        if self._lanes:
            await asyncio.wait([task for _, task in self._lanes.values()], timeout=grace)
        for _, task in list(self._lanes.values()):
            task.cancel()  # its messages go to the spool
        await asyncio.gather(*(t for _, t in list(self._lanes.values())), return_exceptions=True)
        if self._drainer is not None:
            self._drainer.cancel()
            await asyncio.gather(self._drainer, return_exceptions=True)
        await asyncio.gather(*self._spooling, return_exceptions=True)
        await self.spool.close()
        if self.spool.count:
            logger.warning(
                "cluster: %s stopped with %d message(s) spooled; they are published at its next start",
                self.bus.name,
                self.spool.count,
            )

    def disconnected(self) -> None:
        """The connection to the server dropped: what is in flight will not be answered; spool it now."""
        self._direct = False
        for _, task in list(self._lanes.values()):
            task.cancel()

    def reconnected(self) -> None:
        """The connection is back: publish the spool."""
        self._wake.set()

    async def put(self, item: Outgoing) -> None:
        """Take `item`: returns once it is published, in flight, or spooled; waits while there is no room."""
        while True:
            lane = self._lanes.get(item.sid)
            if lane is not None or (self._direct and self._connected()):
                if self._in_flight < _WINDOW:
                    self._in_flight += 1
                    if lane is not None:
                        lane[0].append(item)
                    else:
                        waiting = deque([item])
                        task = asyncio.get_running_loop().create_task(self._lane(item.sid, waiting))
                        self._lanes[item.sid] = (waiting, task)
                    return
            elif not self.spool.full:
                self._spool([item])
                self._direct = False
                self._wake.set()
                return
            self._room.clear()
            await self._room.wait()

    def _connected(self) -> bool:
        return self.bus.nc is not None and self.bus.nc.is_connected

    def _spool(self, items: list[Outgoing]) -> None:
        added = self.spool.add(items)
        self._spooling.add(added)
        added.add_done_callback(self._spooled)

    def _spooled(self, added: asyncio.Future[None]) -> None:
        self._spooling.discard(added)
        if not added.cancelled() and added.exception() is not None:
            logger.error(
                "cluster: %s could not write its spool %s: %s", self.bus.name, self.spool.path, added.exception()
            )

    async def _lane(self, sid: str, waiting: deque[Outgoing]) -> None:
        """Publish a session's messages one after the other; on a failure, spool what is left, in order."""
        try:
            while waiting and self._direct:
                item = waiting[0]
                try:
                    await self.bus.publish(item.subject, item.payload, item.msg_id, timeout=self.timeout)
                except REFUSED as exc:
                    await self._refuse(item, exc)
                except NATS_ERRORS as exc:
                    if self._direct:
                        logger.warning(
                            "cluster: %s: the NATS server did not take a message (%s); spooling until it does",
                            self.bus.name,
                            str(exc) or type(exc).__name__,
                        )
                    self._direct = False
                    break
                waiting.popleft()
                self._in_flight -= 1
                self._room.set()
        finally:
            # In the same step as the lane ends, so this session's next message is spooled behind these.
            del self._lanes[sid]
            if waiting:
                self._in_flight -= len(waiting)
                self._spool(list(waiting))
                waiting.clear()
                self._wake.set()
            self._room.set()

    async def _refuse(self, item: Outgoing, exc: BaseException) -> None:
        reason = str(exc) or type(exc).__name__
        logger.error("cluster: %s: the stream refused a message of %s for good: %s", self.bus.name, item.sid, reason)
        try:
            await self._refused(item, reason)
        except Exception:
            logger.exception("cluster: telling the sender of a refused message of %s failed", item.sid)

    async def _drain(self) -> None:
        pause = _PAUSE_MIN
        while True:
            await self._wake.wait()
            self._wake.clear()
            while not self._direct:
                if not self._connected() or self._lanes:  # lanes wind down into the spool first
                    await asyncio.sleep(_PAUSE_MIN)
                    continue
                await asyncio.gather(*self._spooling, return_exceptions=True)
                if self.spool.count == 0:
                    self._direct = True
                    logger.warning("cluster: %s: the spool is published; publishing directly again", self.bus.name)
                    self._room.set()
                    break
                batch = await self.spool.oldest(_DRAIN_BATCH)
                done = await self._publish_batch(batch)
                if done:
                    await self.spool.remove(done)
                    self._room.set()
                if len(done) < len(batch):
                    await asyncio.sleep(pause)
                    pause = min(pause * 2, _PAUSE_MAX)
                else:
                    pause = _PAUSE_MIN

    async def _publish_batch(self, batch: list[Outgoing]) -> list[Outgoing]:
        """Publish `batch` (oldest first): sessions side by side, each session's in order, stopping at its first
        failure. Returns what the stream holds (or refused for good)."""
        by_session: dict[str, list[Outgoing]] = {}
        for item in batch:
            by_session.setdefault(item.sid, []).append(item)
        done: list[Outgoing] = []

        async def publish(items: list[Outgoing]) -> None:
            for item in items:
                try:
                    await self.bus.publish(item.subject, item.payload, item.msg_id, timeout=self.timeout)
                except REFUSED as exc:
                    await self._refuse(item, exc)
                except NATS_ERRORS:
                    return
                done.append(item)

        await asyncio.gather(*(publish(items) for items in by_session.values()))
        return done
