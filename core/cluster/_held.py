"""The JetStream messages a worker holds unacknowledged: each is settled once (acknowledged, or let go to be
delivered again), and one keep-alive loop tells the server about those held longer than a third of `ack_wait`
(a long turn), instead of a task per message."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg

from core.cluster._bus import NATS_ERRORS
from core.utils.log import logger

__all__ = ["HeldMessages", "RETRY_PAUSE"]

#: Seconds before a message whose turn failed is delivered again: a failing turn does not spin.
RETRY_PAUSE = 0.5


@dataclass
class _Held:
    msg: Msg
    data: dict[str, Any] | None  # its published data, for a batch that writes it down (None: parked already)
    since: float = field(default_factory=time.monotonic)  # when it was delivered or last kept alive
    at_once: bool = False  # the hooks sent it on to a turn as it arrived (never buffered, never parked)
    settled: asyncio.Future[None] | None = None  # resolved when it is settled (see `HeldMessages.until_settled`)


def _resolve(future: asyncio.Future[None] | None) -> None:
    if future is not None and not future.done():
        future.set_result(None)


class HeldMessages:
    """Held messages by id. `hold` takes one (a second delivery of an id replaces the first, which the server no
    longer counts); `acknowledge` and `let_go` settle it, and only the first settles: a settled id is no longer
    held, so nothing acknowledges or lets go a message twice."""

    def __init__(self, ack_wait: float, partition_of_subject: Callable[[str], int | None]) -> None:
        self.ack_wait = ack_wait
        self._partition_of_subject = partition_of_subject
        self._held: dict[str, _Held] = {}

    def __contains__(self, message_id: object) -> bool:
        return message_id in self._held

    def hold(self, message_id: str, msg: Msg, data: dict[str, Any] | None = None) -> None:
        """Hold `msg` (message `message_id`) until it is settled."""
        self._held[message_id] = _Held(msg, data)

    def data(self, message_id: str) -> dict[str, Any] | None:
        """The published data of a held message that is not parked yet (None otherwise)."""
        held = self._held.get(message_id)
        return held.data if held is not None else None

    def sent_on(self, message_id: str) -> None:
        """The hooks sent the held message on to a turn as it arrived: the same hooks send it on alike when it is
        delivered again (with nothing buffered for its session, as now), so its batch forms again by itself."""
        held = self._held.get(message_id)
        if held is not None:
            held.at_once = True

    def went_on_at_once(self, message_id: str) -> bool:
        """Whether `sent_on` was called for the held message `message_id`."""
        held = self._held.get(message_id)
        return held is not None and held.at_once

    async def until_settled(self, message_id: str, turn: asyncio.Future[Any]) -> None:
        """Wait until the held message `message_id` is settled or `turn` (the turn answering it) ends, whichever
        comes first: once its turn is stored the message is acknowledged, and its partition's next message may be
        taken while the turn's last hooks (`final_result`) still run."""
        held = self._held.get(message_id)
        if held is None or turn.done():
            return
        held.settled = waiter = asyncio.get_running_loop().create_future()

        def wake(_: object) -> None:
            _resolve(waiter)

        turn.add_done_callback(wake)
        try:
            await waiter
        finally:
            turn.remove_done_callback(wake)

    def _settle(self, message_id: str) -> _Held | None:
        held = self._held.pop(message_id, None)
        if held is not None:
            _resolve(held.settled)
        return held

    def on(self, partition: int) -> bool:
        """Whether a message of `partition` is held here."""
        return any(self._partition_of_subject(h.msg.subject) == partition for h in self._held.values())

    async def acknowledge(self, ids: Sequence[str]) -> None:
        """Acknowledge the held messages among `ids` (their turn is stored, or they are dropped or parked)."""
        for message_id in ids:
            held = self._settle(message_id)
            if held is not None:
                await ack(held.msg)

    async def let_go(self, message_id: str) -> None:
        """Have a held message delivered again, after `RETRY_PAUSE`. Not by a delayed `nak`: that would free the
        partition's one unacknowledged slot and let later messages overtake it."""
        if message_id not in self._held:
            return
        await asyncio.sleep(RETRY_PAUSE)
        held = self._settle(message_id)
        if held is not None:  # not acknowledged meanwhile
            with contextlib.suppress(*NATS_ERRORS):
                await held.msg.nak()

    async def let_all_go(self) -> None:
        """Closing: every held message is delivered again at once (to this partition's next owner)."""
        held, self._held = self._held, {}
        for h in held.values():
            _resolve(h.settled)
            with contextlib.suppress(*NATS_ERRORS):
                await h.msg.nak()

    async def keep_alive(self) -> None:
        """For ever: every third of `ack_wait`, tell the server (`in_progress`) of each message held that long,
        so a running turn keeps its message."""
        while True:
            await asyncio.sleep(self.ack_wait / 3)
            due = time.monotonic() - self.ack_wait / 3
            for held in list(self._held.values()):
                if held.since <= due:
                    held.since = time.monotonic()
                    with contextlib.suppress(*NATS_ERRORS):
                        await held.msg.in_progress()


async def ack(msg: Msg) -> None:
    """Acknowledge `msg`; a failure is logged (it is delivered again later, and recognised as done by its id)."""
    try:
        await msg.ack()
    except NATS_ERRORS as exc:
        logger.warning("cluster: acknowledging %s failed: %s", msg.subject, exc)
