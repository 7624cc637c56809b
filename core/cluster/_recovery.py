"""What a partition's last owner left unanswered, answered by its new owner: the batches it had begun are redone as
they were (the same messages, so their replies carry the same ids and what was sent is not sent again), and the
other parked messages go back into the buffers and are flushed. A sweep answers parked messages that nothing on
this worker holds."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from core.chat import KiraMessageBatchEvent, KiraMessageEvent, SessionBuffers, TurnResult
from core.chat.wire import WireError, message_from_wire
from core.cluster._held import HeldMessages
from core.cluster._state import ClusterHistory
from core.utils.log import logger
from core.utils.tasks import TaskOwner

__all__ = ["Recovery", "TurnsHost"]


class _Busy(Protocol):
    def is_busy(self, sid: str) -> bool:
        """Whether a turn of `sid` runs or waits."""
        ...


class TurnsHost(Protocol):
    """What recovery uses of the app: its buffers, its turns, and whether a session has one running."""

    @property
    def buffers(self) -> SessionBuffers:
        """The session buffers."""
        ...

    @property
    def scheduler(self) -> _Busy:
        """The turn scheduler."""
        ...

    def flush(self, session: str) -> asyncio.Future[TurnResult] | None:
        """Turn what is buffered for `session` into one batch now."""
        ...

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        """Queue a batch as a turn of its session."""
        ...


_Route = Callable[[str, str, str], None]


class Recovery:
    """Redoes begun batches and answers parked messages. `recovered` holds the ids of the messages of batches being
    redone here: such a message, delivered meanwhile, is held for that batch's turn, which settles it."""

    def __init__(
        self, app: TurnsHost, history: ClusterHistory, held: HeldMessages, route: _Route, tasks: TaskOwner, name: str
    ) -> None:
        self.app = app
        self.history = history
        self.held = held
        self._route = route
        self._tasks = tasks
        self.name = name
        self.recovered: set[str] = set()
        self._suspects: set[str] = set()  # ids the last sweep found parked and held by nothing here

    async def recover(self, partition: int) -> None:
        """Answer what `partition`'s last owner left unanswered (see the module's docstring)."""
        for sid, (turns, messages) in (await self.history.parked(partition)).items():
            logger.warning(
                "cluster: worker %s answers %d message(s) of %s left unanswered", self.name, len(messages), sid
            )
            events = await self._events(sid, messages)
            for ids in turns:
                self._redo(ids, events)
            self._flush_loose(sid, events)

    async def sweep(self, partitions: Sequence[int], consuming: Callable[[int], bool]) -> None:
        """A safety net: parked messages of `partitions` that nothing here holds (no buffer, no running or queued
        turn, no redo) in two sweeps in a row are answered now. They are left behind by a turn that gave up (the
        server away for `PATIENCE`), or by a race while a partition moves.

        Two sightings, because one read can be stale: a turn that ends during the read looks stranded once, and is
        answered (not parked) by the next sweep. A begun batch is redone whole or not at all: a part of it would
        be a batch of other messages, whose replies carry other ids than those it may have sent already."""
        suspects, self._suspects = self._suspects, set()
        for partition in partitions:
            for sid, (turns, messages) in (await self.history.parked(partition)).items():
                if self.app.scheduler.is_busy(sid):
                    continue
                buffered = {e.inbox_id for e in self.app.buffers.peek(sid)}
                loose = {i for i in messages if i not in buffered and i not in self.recovered and i not in self.held}
                self._suspects |= loose
                stranded = {i: d for i, d in messages.items() if i in loose and i in suspects}
                for ids in turns:
                    if not stranded.keys() >= set(ids):  # a part is held here: that part's delivery redoes it
                        for message_id in ids:
                            stranded.pop(message_id, None)
                if not stranded or not consuming(partition):
                    continue
                logger.warning("cluster: worker %s answers %d stranded message(s) of %s", self.name, len(stranded), sid)
                events = await self._events(sid, stranded)
                for ids in turns:
                    self._redo(ids, events)
                self._flush_loose(sid, events)

    async def redo_begun(self, sid: str, message_id: str) -> bool:
        """A redelivered message that a begun batch holds (its turn failed, or its worker died): redo that batch,
        which answers it; False when no begun batch holds it."""
        left = await self.history.parked_of(sid)
        if left is None:
            return False
        turns, messages = left
        for ids in turns:
            if message_id in ids:
                events = await self._events(sid, {i: messages[i] for i in ids if i in messages})
                return self._redo(ids, events)
        return False

    def _flush_loose(self, sid: str, events: dict[str, KiraMessageEvent]) -> None:
        """Parked messages of no begun batch: into this worker's buffer (before what it holds, which came later)
        and answered now, in one batch."""
        for event in [*events.values(), *self.app.buffers.drain(sid)]:
            self.app.buffers.append(event)
        turn = self.app.flush(sid) if events else None
        if turn is not None:
            ids = [i for i in events if i not in self.recovered]
            self.recovered.update(ids)
            turn.add_done_callback(lambda _, ids=ids: self._redone(ids))

    async def _events(self, sid: str, messages: dict[str, dict[str, Any]]) -> dict[str, KiraMessageEvent]:
        events: dict[str, KiraMessageEvent] = {}
        for message_id, data in messages.items():
            try:
                message = message_from_wire(data["message"])
                if message.session is None:
                    raise WireError("the message names no session")
            except (WireError, KeyError) as exc:
                logger.error("cluster: parked message %s of %s cannot be read (%s): dropped", message_id, sid, exc)
                await self.history.unpark(sid, [message_id])
                continue
            self._route(sid, str(data.get("gw", "")), message.session.adapter_name)
            event = events[message_id] = KiraMessageEvent(message)
            event.inbox_id = message_id
        return events

    def _redo(self, ids: list[str], events: dict[str, KiraMessageEvent]) -> bool:
        """Run again a batch that was begun and not stored: the same messages, so the same reply ids. True when
        the batch is being redone here (now, or already)."""
        if self.recovered.intersection(ids):
            return True
        batch = [events.pop(i) for i in ids if i in events]
        if not batch:
            return False
        self.recovered.update(ids)
        turn = self.app.submit(KiraMessageBatchEvent(batch, batch[-1].session))
        turn.add_done_callback(lambda _, ids=ids: self._redone(ids))
        return True

    def _redone(self, ids: Sequence[str]) -> None:
        """A redone batch ended: its messages redelivered meanwhile are let go if its turn did not store them."""
        for message_id in ids:
            self.recovered.discard(message_id)
            if message_id in self.held:
                self._tasks.spawn(self.held.let_go(message_id), name=f"nak-{message_id}")
