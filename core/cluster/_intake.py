"""A worker's way in: one loop per consumed partition fetches its messages (the consumer lets one be unacknowledged
at a time, so one session's turns never overlap and keep arrival order), and each message is settled in one of
the ways `Outcome` names."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import json
from collections.abc import Callable
from typing import Protocol

from nats.aio.msg import Msg

from core.chat import KiraIMMessage, KiraIMSentResult, MessageChain, MessageStrategy, Received, Session
from core.chat.message_elements import Text
from core.chat.wire import WireError, message_from_wire
from core.cluster._bus import NATS_ERRORS, Bus, StandingPull, delivery_of
from core.cluster._held import RETRY_PAUSE, HeldMessages, ack
from core.cluster._recovery import Recovery
from core.cluster._state import ClusterHistory
from core.config import HookchatConfig
from core.history import HistoryError
from core.utils.log import logger

__all__ = ["Intake", "Outcome", "ReceivingApp"]


async def _end_on(stop: asyncio.Event, pull: StandingPull) -> None:
    """End `pull` as soon as `stop` is set, not after the turn running then: the partition's next message is left to
    its next owner, not delivered here and let go (which would count as one of its `max_deliver` deliveries)."""
    await stop.wait()
    await pull.end()


class Outcome(enum.Enum):
    """What became of one delivered message. Every delivery ends in exactly one of these."""

    MALFORMED = "terminated: it cannot be read"
    REDONE = "held for the batch being redone here, which settles it"
    SEEN = "acknowledged: a copy of one answered or parked"
    RETRIED = "let go at once: the cluster could not say whether it was seen"
    REPORTED = "reported to its sender and acknowledged: delivered more than max_deliver times"
    ANSWERED = "its turn ran: acknowledged once stored, or let go"
    PARKED = "parked for a later turn, and acknowledged"
    DROPPED = "dropped by the pipeline (discarded, stopped): acknowledged when the pipeline marks it done"


class ReceivingApp(Protocol):
    """What intake uses of the app: the pipeline's way in, and the one send path (for a notice)."""

    async def receive(self, message: KiraIMMessage, *, inbox_id: str | None = None) -> Received:
        """Run `message` through the pipeline, under the inbox id `inbox_id`."""
        ...

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to `session`."""
        ...


class Intake:
    """Consumes partitions into the app. `turns` counts the messages handled (for `hookchat status`); `recheck`
    holds the partitions to check, between messages, for an acknowledgement the server lost (reconnected)."""

    def __init__(
        self,
        bus: Bus,
        config: HookchatConfig,
        app: ReceivingApp,
        history: ClusterHistory,
        held: HeldMessages,
        recovery: Recovery,
        route: Callable[[str, str, str], None],
        name: str,
    ) -> None:
        self.bus = bus
        self.config = config
        self.app = app
        self.history = history
        self.held = held
        self.recovery = recovery
        self._route = route
        self.name = name
        self.turns = 0
        self.recheck: set[int] = set()

    async def consume(self, partition: int, stop: asyncio.Event) -> None:
        """Handle `partition`'s messages one at a time until `stop` is set (or the task is cancelled)."""
        pull = ending = None
        try:
            while not stop.is_set():
                try:
                    if pull is None:
                        pull = await StandingPull.open(self.bus, f"part-{partition}")
                        ending = asyncio.ensure_future(_end_on(stop, pull))
                    if partition in self.recheck:
                        await self._drop_ghost(partition)
                        await pull.renew()  # the server may have forgotten the request
                    msg = await pull.next(1.0)
                except NATS_ERRORS as exc:
                    logger.debug("cluster: partition %d fetch failed: %s", partition, exc)
                    await asyncio.sleep(0.25)
                    continue
                if msg is None:
                    continue
                if stop.is_set():  # the partition is handed over or lost: its next owner gets the message
                    with contextlib.suppress(*NATS_ERRORS):
                        await msg.nak()
                    break
                try:
                    await self.handle(msg)
                except (HistoryError, *NATS_ERRORS) as exc:  # it was let go: delivered again, in order
                    logger.warning(
                        "cluster: partition %d: a message failed and comes again: %s",
                        partition,
                        str(exc) or type(exc).__name__,
                    )
        finally:
            if ending is not None:
                ending.cancel()
            if pull is not None:
                for msg in await pull.close():  # sent before the server dropped the request: the next owner's
                    with contextlib.suppress(*NATS_ERRORS):
                        await msg.nak()

    async def handle(self, msg: Msg) -> Outcome:
        """Settle one delivered message (see `Outcome`)."""
        try:
            data = json.loads(msg.data.decode())  # a gateway's JSON is UTF-8: `loads` need not detect it
            message_id = str(data["id"])
            message = message_from_wire(data["message"])
            session = message.session
            if session is None:
                raise WireError("the message names no session")
        except (ValueError, KeyError, TypeError, WireError) as exc:
            logger.error("cluster: malformed message on %s dropped: %s", msg.subject, exc)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.term()
            return Outcome.MALFORMED
        self.turns += 1
        sid = session.sid
        self._route(sid, str(data.get("gw", "")), session.adapter_name)
        delivered, _ = delivery_of(msg)
        if message_id in self.recovery.recovered:
            self.held.hold(message_id, msg)
            return Outcome.REDONE
        try:
            if delivered > 1 and await self.recovery.redo_begun(sid, message_id):
                self.held.hold(message_id, msg)
                return Outcome.REDONE
            if await self.history.seen(sid, message_id):
                # Answered, or parked for a turn: a copy (its worker died before acknowledging, a publish was
                # retried, or the server restarted and forgot an acknowledgement).
                await ack(msg)
                return Outcome.SEEN
        except (HistoryError, *NATS_ERRORS) as exc:
            logger.warning("cluster: message %s of %s comes again later: %s", message_id, sid, exc)
            await asyncio.sleep(RETRY_PAUSE)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.nak()
            return Outcome.RETRIED
        if delivered > self.config.cluster.max_deliver:
            logger.error(
                "cluster: message %s of %s failed %d times: reported to its sender", message_id, sid, delivered - 1
            )
            notice = self.config.limits.unanswered_notice.format(message=message.chain.message_repr[:80])
            await self.app.send(session, MessageChain([Text(notice)]))
            await ack(msg)
            return Outcome.REPORTED
        self.held.hold(message_id, msg, data)
        outcome = Outcome.DROPPED
        try:
            received = await self.app.receive(message, inbox_id=message_id)
            if received.turn is not None:
                if received.strategy is not MessageStrategy.BUFFER:  # before the turn begins: nothing yielded yet
                    self.held.sent_on(message_id)
                await self.held.until_settled(message_id, received.turn)
                outcome = Outcome.ANSWERED
            elif received.strategy is MessageStrategy.BUFFER:
                await self.history.park(sid, message_id, data)
                await self.held.acknowledge([message_id])
                outcome = Outcome.PARKED
        finally:
            if message_id in self.held:  # its turn ended without storing (or failed): let it come again
                await self.held.let_go(message_id)
        return outcome

    async def _drop_ghost(self, partition: int) -> None:
        """After the server came back: a message it counts as unacknowledged on `partition` while this worker holds
        none there is one whose acknowledgement it lost (killed before writing it down). Its one slot would block
        the partition for `ack_wait`; the consumer is reset instead, so it comes again at once and is recognised
        as answered. Called by the partition's loop between messages, so nothing of its own is in flight."""
        self.recheck.discard(partition)
        if self.held.on(partition):
            return  # held here (a batch being redone): not a ghost
        consumer = f"part-{partition}"
        info = await self.bus.js.consumer_info(self.bus.in_stream, consumer)
        if info.num_ack_pending:
            logger.warning(
                "cluster: worker %s: partition %d's server forgot an acknowledgement; reset", self.name, partition
            )
            await self.bus.js.reset_consumer(self.bus.in_stream, consumer)
