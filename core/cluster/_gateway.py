"""`hookchat run --role gateway`: the platform connections. Each incoming message is published to its session's
partition (with an id, so a retried publish is stored once) through the `Outbox`, which spools while the server is
away; replies come back on this gateway's own subject and are sent in order through the adapter that holds the
connection, then acknowledged, and the worker that sent them is told the platform's receipt."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
import uuid
from collections import OrderedDict
from typing import Any

from nats.js import api

from core.adapter import Adapter
from core.chat import (
    KiraIMMessage,
    KiraIMSentResult,
    KiraMessageEvent,
    MessageChain,
    MessageStrategy,
    Received,
    Session,
    TurnResult,
)
from core.chat.message_elements import Text
from core.chat.wire import WireError, chain_from_wire, message_from_wire, message_to_wire, session_from_wire
from core.cluster._bus import NATS_ERRORS, Bus, ClusterError, StandingPull, default_name, delivery_of, to_json
from core.cluster._spool import Outbox, Outgoing, Spool
from core.config import HookchatConfig
from core.utils.log import logger
from core.utils.tasks import TaskOwner

__all__ = ["Gateway"]

_SENT_KEPT = 50_000  # reply ids a gateway remembers having sent, so a redelivered reply is not sent twice


class Gateway:
    """Holds `adapters` and is their `AdapterHost`: what they receive goes to the workers, what the workers send
    comes back through them. `async with Gateway(config, adapters) as gateway:` runs it."""

    def __init__(self, config: HookchatConfig, adapters: list[Adapter], *, name: str | None = None) -> None:
        self.config = config
        self.name = name or config.cluster.name or default_name("gateway")
        self.bus = Bus(config.cluster, self.name)
        self.adapters = {a.name: a for a in adapters}
        self.received = 0
        self.replied = 0
        self._sent: OrderedDict[str, None] = OrderedDict()
        self._tasks = TaskOwner(f"gateway {self.name}")
        self._started_at = time.time()
        cluster = config.cluster
        spool = Spool(
            config.data.dir / "cluster-spool.sqlite3",
            max_messages=cluster.spool_messages,
            max_bytes=cluster.spool_bytes,
        )
        self.outbox = Outbox(self.bus, spool, timeout=cluster.publish_timeout, refused=self._tell_refused)
        self.bus.on_connection = lambda up: self.outbox.reconnected() if up else self.outbox.disconnected()

    async def start(self) -> None:
        """Connect, open the spool, register, start the reply loop and then the adapters."""
        await self.bus.connect()
        try:
            await self.outbox.start()
            await self.bus.js.add_consumer(
                self.bus.out_stream,
                api.ConsumerConfig(
                    durable_name=f"gw-{self.name}",
                    filter_subject=self.bus.out_subject(self.name),
                    ack_policy=api.AckPolicy.EXPLICIT,
                    ack_wait=self.config.cluster.ack_wait,
                    max_ack_pending=10_000,
                ),
            )
            await self._register()
            self._tasks.spawn(self._replies(), name="replies")
            self._tasks.spawn(self._heartbeats(), name="heartbeats")
            for adapter in self.adapters.values():
                await adapter.start(self)
        except NATS_ERRORS as exc:
            await self.aclose()
            raise ClusterError(f"gateway {self.name} cannot start: {exc}") from exc
        except BaseException:
            await self.aclose()
            raise
        logger.info("cluster: gateway %s started with adapters %s", self.name, ", ".join(self.adapters) or "none")

    async def aclose(self) -> None:
        """Stop the adapters, publish (or spool) what they delivered, stop the reply loop and the connection."""
        for adapter in self.adapters.values():
            try:
                await adapter.stop()
            except Exception:
                logger.exception("adapter %r failed to stop", adapter.name)
        await self.outbox.aclose()
        await self._tasks.aclose()
        if self.bus.members is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await self.bus.members.delete(f"gateway.{self.name}")
        await self.bus.close()

    async def __aenter__(self) -> Gateway:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def _register(self) -> None:
        adapters = {name: sorted(a.capabilities) for name, a in self.adapters.items()}
        await self.bus.register(
            "gateway",
            {
                "pid": os.getpid(),
                "started": self._started_at,
                "seen": time.time(),
                "adapters": adapters,
                "received": self.received,
                "replied": self.replied,
            },
        )

    async def _heartbeats(self) -> None:
        while True:
            await asyncio.sleep(self.config.cluster.lease_seconds / 4)
            try:
                await self._register()
            except NATS_ERRORS as exc:
                logger.warning("cluster: gateway %s heartbeat failed: %s", self.name, str(exc) or type(exc).__name__)

    # -- the adapters' host ---------------------------------------------------------------------------------------

    async def receive(self, message: KiraIMMessage) -> Received:
        """Hand the message to the outbox: returns once it is published, on its way, or spooled (durably, while
        the server is away). Waits while the spool is full, so the adapter stops reading from its platform."""
        event = KiraMessageEvent(message)  # derives the session, as the pipeline would
        sid = message.session.sid  # type: ignore[union-attr] - set by KiraMessageEvent
        if message.message_id:  # the platform's id: a platform that delivers a message twice is answered once
            message_id = hashlib.blake2b(f"{sid}\0{message.message_id}".encode(), digest_size=12).hexdigest()
        else:
            message_id = uuid.uuid4().hex
        data = {"id": message_id, "gw": self.name, "message": message_to_wire(message)}
        payload = to_json(data).encode()
        await self.outbox.put(Outgoing(sid, self.bus.in_subject(self.bus.partition(sid)), message_id, payload))
        self.received += 1
        return Received(event, MessageStrategy.TRIGGER)

    async def _tell_refused(self, item: Outgoing, reason: str) -> None:
        """The stream refused a message for good: its sender is told (`[limits] refused_notice`)."""
        message = message_from_wire(json.loads(item.payload)["message"])
        session = message.session
        adapter = self.adapters.get(session.adapter_name) if session is not None else None
        if session is None or adapter is None:
            return
        text = self.config.limits.refused_notice.format(message=message.chain.message_repr[:80], reason=reason)
        result = await adapter.send(session, MessageChain([Text(text)]))
        if not result.ok:
            logger.warning("cluster: the sender of a refused message of %s was not told: %s", item.sid, result.error)

    async def respond(self, message: KiraIMMessage) -> TurnResult | None:
        """Publish the message; the turn runs on a worker, so there is no result to wait for here."""
        await self.receive(message)
        return None

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Buffers live on the workers: nothing to flush here."""
        return None

    def cancel_turn(self, session: Session | str) -> bool:
        """Turns run on the workers; a gateway cannot stop one (False)."""
        return False

    # -- replies --------------------------------------------------------------------------------------------------

    async def _replies(self) -> None:
        """Send the replies for this gateway, in the order the stream holds them, from one standing pull request
        (not a fetch round trip per few replies).

        A reply the server delivered and this gateway never got (lost as the server went away) would otherwise
        stay unacknowledged for `ack_wait` and then come after the session's later replies. So the consumer is
        reset (JetStream's consumer reset, nats-server 2.14 or later) at the start, after each reconnection, and
        whenever a delivery is missing (its delivery sequence skips one): everything unacknowledged then comes
        again at once, in stream order, and what was already sent is recognised by its id."""
        pull: StandingPull | None = None
        expected: int | None = None  # the next delivery's consumer sequence; None: not known (no reset)
        reconnects = -1  # the connection's reconnections when the pull was made
        missed = False
        try:
            while True:
                try:
                    if pull is None or missed or self.bus.nc.stats["reconnects"] != reconnects:
                        old, pull, missed = pull, None, False
                        reconnects = self.bus.nc.stats["reconnects"]
                        pull, expected = await self._reply_pull(old)
                    msg = await pull.next(1.0)
                except NATS_ERRORS as exc:
                    logger.debug("cluster: gateway %s reply pull failed: %s", self.name, exc)
                    await asyncio.sleep(0.25)
                    continue
                if msg is None:
                    continue
                _, delivered = delivery_of(msg)
                if expected is not None and delivered != expected:
                    logger.warning(
                        "cluster: gateway %s missed a reply (delivery %d came, %d was next); resetting its consumer",
                        self.name,
                        delivered,
                        expected,
                    )
                    missed = True  # what came after it comes again after the reset
                    continue
                expected = delivered + 1
                await self._reply(msg)
        finally:
            if pull is not None:  # delivered and not sent: they come again after the reset at the next start
                await pull.close()

    async def _reply_pull(self, old: StandingPull | None) -> tuple[StandingPull, int | None]:
        """A new standing pull on this gateway's replies, the consumer reset first; and the consumer sequence its
        first delivery will have (1 after a reset; None when the server cannot reset, which leaves a missed reply
        to come again after `ack_wait`). What the old pull held and had not sent comes again."""
        if old is not None:
            await old.close()
        consumer = f"gw-{self.name}"
        expected = None
        if self.bus.can_reset:
            await self.bus.js.reset_consumer(self.bus.out_stream, consumer)
            expected = 1
        return await StandingPull.open(self.bus, consumer, self.bus.out_stream), expected

    async def _reply(self, msg: Any) -> None:
        try:
            data = json.loads(msg.data)
            reply_id = str(data["id"])
            session = session_from_wire(data["session"])
            chain = chain_from_wire(data["chain"])
        except (ValueError, KeyError, TypeError, WireError) as exc:
            logger.error("cluster: malformed reply dropped: %s", exc)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.term()
            return
        receipt_to = (msg.headers or {}).get("Hookchat-Receipt")
        if reply_id in self._sent:  # redelivered after its acknowledgement was lost
            result: KiraIMSentResult | None = None
        else:
            adapter = self.adapters.get(session.adapter_name)
            if adapter is None:
                result = KiraIMSentResult(
                    chain, session, ok=False, error=f"gateway {self.name} has no adapter {session.adapter_name!r}"
                )
            else:
                try:
                    result = await adapter.send(session, chain)
                except Exception as exc:  # an adapter that raises is reported, not fatal
                    logger.exception("sending to %s failed", session.sid)
                    result = KiraIMSentResult(chain, session, ok=False, error=f"{type(exc).__name__}: {exc}")
            if not result.ok:
                logger.warning("cluster: reply to %s not sent: %s", session.sid, result.error)
            self._sent[reply_id] = None
            if len(self._sent) > _SENT_KEPT:
                self._sent.popitem(last=False)
            self.replied += 1
        with contextlib.suppress(*NATS_ERRORS):
            await msg.ack()
            if receipt_to and result is not None:
                receipt = {"ok": result.ok, "message_id": result.message_id, "error": result.error}
                await self.bus.nc.publish(receipt_to, json.dumps(receipt).encode())
