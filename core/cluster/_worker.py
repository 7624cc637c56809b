"""`hookchat run --role worker`: the pipeline and the plugins, fed by the partitions this worker owns.

Ownership: every worker registers in the members bucket; partition p belongs to the live worker with the highest
hash of (p, name) (rendezvous hashing, so a worker joining or leaving moves only its share). A worker consumes p
only while it holds p's lease (a key in the leases bucket that expires `lease_seconds` after its last renewal), so
a dead worker's partitions move once its leases expire; a worker that leaves gives them up at once. Whoever
consumes, p's consumer lets one message be unacknowledged at a time: one session's turns never overlap and keep
arrival order, even while a partition changes hands.

A message is acknowledged when its turn is stored (`ClusterHistory.append_turn`), when it is dropped (discarded,
stopped), or once parked in the buffers bucket for a later turn. A running turn keeps its message's lease with
`in_progress`. A redelivered message whose turn is stored is acknowledged without a turn; one delivered more
than `max_deliver` times is reported to its sender and acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import time
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import nats.errors
import nats.js.errors

from core.adapter import ALL_ELEMENTS, Adapter
from core.app import HookChat
from core.builtins import BUILTIN_PLUGINS
from core.chat import (
    KiraEvent,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    MessageStrategy,
    Session,
)
from core.chat.message_elements import Text
from core.chat.wire import WireError, chain_to_wire, message_from_wire, session_to_wire
from core.cluster._bus import NATS_ERRORS, Bus, default_name
from core.cluster._state import PATIENCE, ClusterHistory, ClusterPluginStore
from core.config import HookchatConfig
from core.history import HistoryError
from core.plugin import BasePlugin, on
from core.provider import LLMProvider
from core.utils.log import logger
from core.utils.tasks import TaskOwner

__all__ = ["Worker", "RemoteAdapter", "owner_of"]

_FIRST = 1_000  # above every named priority: the batch is written down before any other hook sees the turn
_ROUTES_KEPT = 100_000  # sessions whose gateway a worker remembers
_RETRY_PAUSE = 0.5  # seconds before a message whose turn failed is delivered again
_RENEW_PAUSE = 0.05  # seconds between attempts to renew a lease while the server does not answer


def owner_of(partition: int, workers: Sequence[str]) -> str | None:
    """The worker that should own `partition` among `workers` (rendezvous hashing); None when there are none."""
    if not workers:
        return None
    return max(workers, key=lambda w: hashlib.blake2b(f"{partition}:{w}".encode(), digest_size=8).digest())


class RemoteAdapter(Adapter):
    """On a worker, the stand-in for an adapter a gateway holds: `send` publishes the message to that gateway's
    reply subject and waits up to `[cluster] receipt_timeout` for the platform's receipt (0: not at all; the
    result is then `ok` once the stream holds the reply, with no message id).

    A turn's replies are numbered (a hash of its messages' ids, and the reply's index) and published with that id,
    so a turn redone after a worker died does not send again what it had sent."""

    drafts = False

    def __init__(self, name: str, worker: Worker, capabilities: frozenset[str] = ALL_ELEMENTS) -> None:
        super().__init__(name)
        self.capabilities = capabilities
        self.worker = worker

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """A message outside any turn."""
        return await self.send_in_turn(session, chain, None)

    async def send_in_turn(self, session: Session, chain: MessageChain, event: KiraEvent | None) -> KiraIMSentResult:
        """Publish the reply to the gateway that holds the session's connection, and wait for its receipt."""
        reply_id = None
        if isinstance(event, KiraMessageBatchEvent):
            ids = [m.inbox_id for m in event.messages if m.inbox_id]
            if ids:
                batch = hashlib.blake2b("\0".join(ids).encode(), digest_size=12).hexdigest()
                reply_id = f"{batch}.{event.sends}"
        return await self.worker.publish_reply(session, chain, reply_id)


class Worker:
    """A worker process's parts: the bus, a `HookChat` whose history and plugin stores live in the cluster, and
    the partitions it owns. `async with Worker(config) as worker:` starts it; leaving hands its partitions over."""

    def __init__(
        self,
        config: HookchatConfig,
        *,
        provider: LLMProvider | None = None,
        plugins: list[type | str | Path] = (),  # type: ignore[assignment]
        builtins: Iterable[str] = BUILTIN_PLUGINS,
        entry_points: bool = True,
        name: str | None = None,
    ) -> None:
        self.config = config
        self.cluster = config.cluster
        self.name = name or config.cluster.name or default_name("worker")
        self.bus = Bus(config.cluster, self.name)
        self.history = ClusterHistory(
            self.bus,
            max_turns=config.limits.history_turns,
            max_tokens=config.limits.history_tokens,
            done=self._acknowledge,
            owns=self.owns,
            confirm=self._holds_lease,
        )
        self.app = HookChat(
            config,
            provider=provider,
            plugins=[self._intents_plugin(), *plugins],
            history=self.history,
            builtins=builtins,
            entry_points=entry_points,
        )
        self.app.store_factory = lambda plugin_id: ClusterPluginStore(self.bus, plugin_id)
        self.turns = 0  # messages handled, for `hookchat status`
        self._held: dict[str, tuple[Any, asyncio.Task[None]]] = {}  # message id -> (JetStream message, keep-alive)
        self._data: dict[str, dict[str, Any]] = {}  # message id -> its published data, while held
        self._recovered: set[str] = set()  # ids of messages in batches this worker is redoing
        self._suspects: set[str] = set()  # ids the last sweep found parked and held by nothing here
        self._stopping: set[int] = set()  # partitions whose lease was lost, while their loop and turns stop
        self._routes: OrderedDict[str, str] = OrderedDict()  # session -> the gateway that delivered its last message
        self._owned: dict[int, tuple[int, asyncio.Task[None], asyncio.Event]] = {}  # partition -> lease rev, loop, stop
        self._releasing: dict[int, int] = {}  # partition -> lease revision, while handing it over
        self._renewed: dict[int, float] = {}  # partition -> when (monotonic) its last renewal that succeeded was sent
        self._earlier: set[int] = set()  # partitions this worker's earlier run (same name) owned, not yet taken back
        self._noted: list[int] | None = None  # the owned partitions last noted in the data directory
        self._recheck: set[int] = set()  # partitions to check for an acknowledgement the server lost (reconnected)
        self.bus.on_connection = lambda up: self._recheck.update(self._owned) if up else None
        self._tasks = TaskOwner(f"worker {self.name}")
        self._receipts: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._receipt_sub: Any = None
        self._gateways: dict[str, dict[str, Any]] = {}  # live gateways by name, refreshed each heartbeat
        self._started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, start the app, register, and begin taking partitions."""
        await self.bus.connect()
        try:
            self._receipt_sub = await self.bus.nc.subscribe(
                f"{self.bus.prefix}.receipt.{self.name}.*", cb=self._on_receipt
            )
            await self.app.start()
            self._earlier = set((await asyncio.to_thread(self._read_record)).get("owned", []))
            await self._heartbeat()
        except BaseException:
            await self.aclose()
            raise
        self._tasks.spawn(self._heartbeats(), name="heartbeats")
        self._tasks.spawn(self._renewals(), name="renewals")
        logger.info("cluster: worker %s started", self.name)

    async def aclose(self) -> None:
        """Stop taking messages, finish the ones in hand, give the partitions up, stop the app, disconnect."""
        await self._tasks.aclose()
        await asyncio.gather(*(self._release(p) for p in list(self._owned)), return_exceptions=True)
        await self.app.aclose()
        for msg, keep_alive in self._held.values():
            keep_alive.cancel()
            with contextlib.suppress(*NATS_ERRORS):
                await msg.nak()
        self._held.clear()
        if self.bus.members is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await self.bus.members.delete(f"worker.{self.name}")
        await self.bus.close()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def owns(self, sid: str) -> bool:
        """Whether this worker holds the lease of `sid`'s partition (consuming it, or handing it over)."""
        partition = self.bus.partition(sid)
        return partition in self._owned or partition in self._releasing

    async def _holds_lease(self, sid: str) -> bool:
        """Whether the server still has this worker as the owner of `sid`'s partition: checked before a message is
        parked and before a turn begins, so a worker that stalled past its lease does not act for the new owner.
        Within half a lease of a renewal that succeeded, the lease cannot have expired: no need to ask."""
        assert self.bus.leases is not None
        partition = self.bus.partition(sid)
        renewed = self._renewed.get(partition)
        if renewed is not None and time.monotonic() - renewed < self.cluster.lease_seconds / 2:
            return True
        try:
            entry = await self.bus.leases.get(f"p{partition}")
        except nats.js.errors.KeyNotFoundError:
            entry = None
        if entry is not None and entry.value == self.name.encode():
            return True
        self._lost(partition)  # at once, not at the next renewal: the partition's messages go to its owner
        return False

    def _intents_plugin(self) -> type:
        worker = self

        class ClusterTurns(BasePlugin):
            """Writes each turn's batch down in the cluster before the turn runs (see `ClusterHistory.intend`)."""

            @on.im_batch_message(priority=_FIRST, deadline=PATIENCE + 60)
            async def record_batch(self, event: KiraMessageBatchEvent, *args: Any, **kwargs: Any) -> None:
                ids = [m.inbox_id for m in event.messages if m.inbox_id]
                if ids:
                    unparked = {i: worker._data[i] for i in ids if i in worker._data}
                    try:
                        await worker.history.intend(event.sid, ids, unparked)
                    except HistoryError as exc:  # no turn may send what a redo could not match
                        # Parked, they are answered by the partition's next owner, or by this one's sweep.
                        logger.warning("cluster: turn of %s put off: %s", event.sid, exc)
                        worker.history.abandoned.update(ids)
                        event.stop()

        return ClusterTurns

    @property
    def partitions(self) -> list[int]:
        """The partitions this worker consumes now."""
        return sorted(self._owned)

    # -- ownership ------------------------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        beats = 0
        while True:
            await asyncio.sleep(self.cluster.lease_seconds / 4)
            beats += 1
            try:
                await self._heartbeat()
                if beats % 8 == 0:
                    await self._sweep()
            except (HistoryError, *NATS_ERRORS) as exc:
                logger.warning("cluster: worker %s heartbeat failed: %s", self.name, str(exc) or type(exc).__name__)

    async def _heartbeat(self) -> None:
        """Register, then take the partitions this worker should own, for at most a quarter of the lease time per
        heartbeat. (Leases are renewed on their own schedule, `_renewals`: nothing here may delay them.)"""
        began = time.monotonic()
        await self.bus.register(
            "worker",
            {
                "pid": os.getpid(),
                "started": self._started_at,
                "seen": time.time(),
                "partitions": self.partitions,
                "turns": self.turns,
            },
        )
        self._gateways = {g["name"]: g for g in await self.bus.members_of("gateway")}
        workers = [w["name"] for w in await self.bus.members_of("worker")]
        if self.name not in workers:
            workers.append(self.name)
        wanted = {p for p in range(self.cluster.partitions) if owner_of(p, workers) == self.name}
        for partition in list(self._owned):
            if partition not in wanted:
                self._tasks.spawn(self._release(partition), name=f"release-{partition}")
        for partition in sorted(wanted - set(self._owned) - set(self._releasing) - self._stopping):
            if time.monotonic() - began > self.cluster.lease_seconds / 4:
                break  # the rest at the next heartbeat
            await self._acquire(partition)
        await self._note_owned()

    async def _renewals(self) -> None:
        """Renew every lease held each sixth of `lease_seconds`: a lease then outlives an outage of the server of
        up to about five sixths of it (each attempt is bounded, and retried at once until the server answers)."""
        while True:
            await asyncio.sleep(self.cluster.lease_seconds / 6)
            owned, releasing = list(self._owned.items()), list(self._releasing.items())
            renewed = await asyncio.gather(
                *(self._renew_patiently(p, rev) for p, (rev, _, _) in owned),
                *(self._renew_patiently(p, rev) for p, rev in releasing),
            )
            for (partition, (_, loop, stop)), (revision, sent) in zip(owned, renewed[: len(owned)]):
                if self._owned.get(partition, (0, None))[1] is not loop:
                    continue  # released or lost meanwhile
                if revision is None:
                    self._lost(partition)
                else:
                    self._owned[partition] = (revision, loop, stop)
                    self._renewed[partition] = sent
            for (partition, _), (revision, _) in zip(releasing, renewed[len(owned) :]):
                if revision is not None and partition in self._releasing:
                    self._releasing[partition] = revision

    async def _renew_patiently(self, partition: int, revision: int) -> tuple[int | None, float]:
        """Renew one lease, each attempt bounded by a twelfth of `lease_seconds` and retried at once, until the
        server answers or the lease has certainly expired. Returns the new revision (None: lost) and when the
        attempt that succeeded was sent."""
        began = time.monotonic()
        last = self._renewed.get(partition, began)
        while True:
            sent = time.monotonic()
            try:
                if not self.bus.nc.is_connected:  # nothing would reach the server; nats-py would buffer it
                    raise nats.errors.ConnectionReconnectingError
                return await asyncio.wait_for(self._renew(partition, revision), self.cluster.lease_seconds / 12), sent
            except (TimeoutError, *NATS_ERRORS) as exc:
                if sent - last > self.cluster.lease_seconds:
                    logger.warning(
                        "cluster: worker %s could not renew partition %d's lease for %.1f s: %s",
                        self.name,
                        partition,
                        sent - last,
                        str(exc) or type(exc).__name__,
                    )
                    return None, sent
                await asyncio.sleep(_RENEW_PAUSE)

    async def _renew(self, partition: int, revision: int) -> int | None:
        """The lease's new revision, or None when another worker holds it now."""
        assert self.bus.leases is not None
        key = f"p{partition}"
        try:
            return await self.bus.leases.update(key, self.name.encode(), last=revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        try:  # an earlier renewal may have been stored with its answer lost (the server restarting)
            entry = await self.bus.leases.get(key)
        except nats.js.errors.KeyNotFoundError:
            return await self._retake(partition)
        if entry.value != self.name.encode():
            return None
        return await self._renew(partition, entry.revision or 0) if entry.revision != revision else None

    async def _retake(self, partition: int) -> int | None:
        """The lease expired while the server was away. Written again at once, it stays this worker's: no other
        worker can have taken the partition and given it up again within a quarter lease of its expiry (a
        worker gives a partition up at a heartbeat after the one that took it); an eighth is allowed, for margin.
        Later than that, it is lost."""
        assert self.bus.leases is not None
        last = self._renewed.get(partition)
        if last is None or time.monotonic() - last > self.cluster.lease_seconds * 1.125:  # a margin under 1.25
            return None
        try:
            revision = await self.bus.leases.create(f"p{partition}", self.name.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return None  # another worker took it
        logger.warning("cluster: worker %s wrote partition %d's lease again after it expired", self.name, partition)
        self.history.forget(partition)  # read its sessions' values from the server again, to be sure
        return revision

    async def _acquire(self, partition: int) -> None:
        assert self.bus.leases is not None
        key = f"p{partition}"
        began = time.monotonic()
        earlier_run = False
        try:
            revision: int | None = await self.bus.leases.create(key, self.name.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            try:
                entry = await self.bus.leases.get(key)
            except nats.js.errors.KeyNotFoundError:
                return
            if entry.value != self.name.encode():  # another worker still holds it: wait for it to expire or go
                return
            # Ours, from this worker's earlier run under the same name, which is gone (names are unique): renewed
            # now, since it expires earlier than a fresh one.
            revision = await self._renew(partition, entry.revision or 0)
            if revision is None:
                return
            earlier_run = True
        if partition in self._earlier:  # owned by this worker's earlier run (its lease may have expired since)
            self._earlier.discard(partition)
            earlier_run = True
        self.history.forget(partition)  # another worker may have written its sessions' values since
        await self._recover(partition)
        if earlier_run:
            await self._reclaim(partition)
        stop = asyncio.Event()
        loop = self._tasks.spawn(self._consume(partition, stop), name=f"partition-{partition}")
        self._owned[partition] = (revision, loop, stop)
        self._renewed[partition] = began
        logger.info(
            "cluster: worker %s took partition %d%s",
            self.name,
            partition,
            " back from its earlier run" if earlier_run else "",
        )

    async def _reclaim(self, partition: int) -> None:
        """The message this worker's earlier run held unacknowledged on `partition` is delivered again now, not
        after `ack_wait` (JetStream's consumer reset, ADR-60). Safe: no live worker holds it (this one has the
        lease), and a copy of a message already answered is recognised by its id. The reset also clears the message's delivery count,
        so the resets of one message are counted here (in the data directory): past `max_deliver`, a message
        that keeps ending its worker waits `ack_wait` again and is reported to its sender in the end."""
        consumer = f"part-{partition}"
        try:
            info = await self.bus.js.consumer_info(self.bus.in_stream, consumer)
            if not info.num_ack_pending or info.delivered is None:
                return
            seq = info.delivered.stream_seq or 0
            record = await asyncio.to_thread(self._read_record)
            resets = record.setdefault("resets", {})
            done = resets.get(str(partition), [0, 0])
            count = done[1] + 1 if done[0] == seq else 1
            if count > self.cluster.max_deliver:
                logger.error(
                    "cluster: worker %s: the message it held on partition %d was taken back %d times; "
                    "it waits ack_wait now",
                    self.name,
                    partition,
                    count - 1,
                )
                return
            resets[str(partition)] = [seq, count]
            await asyncio.to_thread(self._write_record, record)
            await self.bus.js.reset_consumer(self.bus.in_stream, consumer)
        except NATS_ERRORS as exc:  # it is delivered again after ack_wait, as after any worker's death
            logger.warning(
                "cluster: worker %s could not take back partition %d's held message: %s",
                self.name,
                partition,
                str(exc) or type(exc).__name__,
            )
            return
        logger.info(
            "cluster: worker %s: partition %d's message held by its earlier run comes again now", self.name, partition
        )

    @property
    def _record_path(self) -> Path:
        return self.config.data.dir / f"cluster-{self.name}.json"

    def _read_record(self) -> dict[str, Any]:
        """What this worker's runs under its name noted in its data directory: the partitions the last one owned
        (`owned`) and the resets of held messages (`resets`, partition -> [stream sequence, count])."""
        try:
            record = json.loads(self._record_path.read_text())
        except (OSError, ValueError):
            return {"owned": [], "resets": {}}
        return record if isinstance(record, dict) else {"owned": [], "resets": {}}

    def _write_record(self, record: dict[str, Any]) -> None:
        self._record_path.parent.mkdir(parents=True, exist_ok=True)
        self._record_path.write_text(json.dumps(record))

    async def _note_owned(self) -> None:
        """Note the partitions owned now, so that a restart under this name knows which it held."""
        owned = sorted(self._owned)
        if owned != self._noted:
            self._noted = owned
            record = await asyncio.to_thread(self._read_record)
            record["owned"] = owned
            await asyncio.to_thread(self._write_record, record)

    async def _recover(self, partition: int) -> None:
        """What the partition's last owner left unanswered: the batches it had begun are redone as they were (so
        their replies carry the same ids, and what was sent is not sent again), then the other parked messages go
        back into this worker's buffers and are flushed."""
        for sid, (turns, messages) in (await self.history.parked(partition)).items():
            logger.warning(
                "cluster: worker %s answers %d message(s) of %s left unanswered", self.name, len(messages), sid
            )
            events = await self._events(sid, messages)
            for ids in turns:
                self._redo(ids, events)
            self._flush_loose(sid, events)

    def _flush_loose(self, sid: str, events: dict[str, KiraMessageEvent]) -> None:
        """Parked messages of no begun batch: into this worker's buffer (before what it holds, which came later)
        and answered now, in one batch."""
        for event in [*events.values(), *self.app.buffers.drain(sid)]:
            self.app.buffers.append(event)
        turn = self.app.flush(sid) if events else None
        if turn is not None:
            ids = [i for i in events if i not in self._recovered]
            self._recovered.update(ids)
            turn.add_done_callback(lambda _, ids=ids: self._redone(ids))

    async def _sweep(self) -> None:
        """A safety net: parked messages of this worker's partitions that nothing here holds (no buffer, no
        running or queued turn, no redo) in two sweeps in a row are answered now. They are left behind by a turn
        that gave up (the server away for `PATIENCE`), or by a race while a partition moves.

        Two sightings, because one read can be stale: a turn that ends during the read looks stranded once, and is
        answered (not parked) by the next sweep."""
        suspects, self._suspects = self._suspects, set()
        for partition in list(self._owned):
            for sid, (turns, messages) in (await self.history.parked(partition)).items():
                if self.app.scheduler.is_busy(sid):
                    continue
                buffered = {e.inbox_id for e in self.app.buffers.peek(sid)}
                loose = {i for i in messages if i not in buffered and i not in self._recovered and i not in self._held}
                self._suspects |= loose
                stranded = {i: d for i, d in messages.items() if i in loose and i in suspects}
                if not stranded or partition not in self._owned:
                    continue
                logger.warning("cluster: worker %s answers %d stranded message(s) of %s", self.name, len(stranded), sid)
                events = await self._events(sid, stranded)
                for ids in turns:
                    self._redo(ids, events)
                self._flush_loose(sid, events)

    async def _events(self, sid: str, messages: dict[str, dict[str, Any]]) -> dict[str, KiraMessageEvent]:
        events: dict[str, KiraMessageEvent] = {}
        for message_id, data in messages.items():
            try:
                message = message_from_wire(data["message"])
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
        if self._recovered.intersection(ids):
            return True
        batch = [events.pop(i) for i in ids if i in events]
        if not batch:
            return False
        self._recovered.update(ids)
        turn = self.app.submit(KiraMessageBatchEvent(batch, batch[-1].session))
        turn.add_done_callback(lambda _, ids=ids: self._redone(ids))
        return True

    async def _redo_begun(self, sid: str, message_id: str) -> bool:
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

    def _redone(self, ids: Sequence[str]) -> None:
        """A redone batch ended: its messages redelivered meanwhile are let go if its turn did not store them."""
        for message_id in ids:
            self._recovered.discard(message_id)
            if message_id in self._held:
                self._tasks.spawn(self._let_go(message_id), name=f"nak-{message_id}")

    async def _let_go(self, message_id: str) -> None:
        """Have a held message delivered again. Without a delay: a delayed one would free the partition's one
        unacknowledged slot and let later messages overtake it; the pause keeps a failing turn from spinning."""
        held = self._held.get(message_id)
        if held is None:
            return
        held[1].cancel()
        await asyncio.sleep(_RETRY_PAUSE)
        self._held.pop(message_id, None)
        self._data.pop(message_id, None)
        with contextlib.suppress(*NATS_ERRORS):
            await held[0].nak()

    async def _release(self, partition: int) -> None:
        """Hand `partition` over: stop consuming, let its turns finish, then delete the lease."""
        owned = self._owned.pop(partition, None)
        self._renewed.pop(partition, None)
        if owned is None:
            return
        revision, loop, stop = owned
        self._releasing[partition] = revision
        stop.set()
        with contextlib.suppress(asyncio.CancelledError):
            await loop
        sids = self._drop_buffers(partition)
        while any(self.app.scheduler.is_busy(sid) for sid in sids):
            await asyncio.sleep(0.05)
        revision = self._releasing.pop(partition)
        assert self.bus.leases is not None
        with contextlib.suppress(*NATS_ERRORS):
            await self.bus.leases.delete(f"p{partition}", last=revision)
        logger.info("cluster: worker %s gave partition %d up", self.name, partition)

    def _lost(self, partition: int) -> None:
        """The lease expired (this worker stalled past `lease_seconds`, or the server was away that long) and may be
        another worker's: stop at once; the partition is taken again if it is still this worker's to own."""
        owned = self._owned.pop(partition, None)
        self._renewed.pop(partition, None)
        if owned is not None:
            self._stopping.add(partition)
            self._tasks.spawn(self._stop_lost(partition, owned[1], owned[2]), name=f"lost-{partition}")
            logger.warning("cluster: worker %s lost partition %d (its lease expired)", self.name, partition)

    async def _stop_lost(self, partition: int, loop: asyncio.Task[None], stop: asyncio.Event) -> None:
        try:
            stop.set()  # as well as cancelling: Python 3.11's `wait_for` (inside nats-py's fetch) can swallow a cancel
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            sids = self._drop_buffers(partition)
            while any(self.app.scheduler.is_busy(sid) for sid in sids):  # fenced: they send and store nothing
                await asyncio.sleep(0.05)
        finally:
            self._stopping.discard(partition)

    def _drop_buffers(self, partition: int) -> set[str]:
        """Forget this worker's buffers of `partition`'s sessions: they stay parked for the next owner."""
        sids = {sid for sid in self.app.buffers.sessions() if self.bus.partition(sid) == partition}
        sids |= {sid for sid in self.app.scheduler.busy() if self.bus.partition(sid) == partition}
        for sid in sids:
            self.app.buffers.drain(sid)
        self.history.forget_parked(sids)
        return sids

    # -- messages -------------------------------------------------------------------------------------------------

    async def _consume(self, partition: int, stop: asyncio.Event) -> None:
        sub = None
        while not stop.is_set():
            try:
                if partition in self._recheck:
                    await self._drop_ghost(partition)
                if sub is None:
                    sub = await self.bus.js.pull_subscribe_bind(durable=f"part-{partition}", stream=self.bus.in_stream)
                messages = await sub.fetch(1, timeout=1.0)
            except (TimeoutError, nats.errors.TimeoutError):
                continue
            except NATS_ERRORS as exc:
                logger.debug("cluster: partition %d fetch failed: %s", partition, exc)
                await asyncio.sleep(0.25)
                continue
            for msg in messages:
                if stop.is_set():  # the partition is handed over or lost: its next owner gets the message
                    with contextlib.suppress(*NATS_ERRORS):
                        await msg.nak()
                    continue
                try:
                    await self._handle(msg)
                except (HistoryError, *NATS_ERRORS) as exc:  # it was let go: delivered again, in order
                    logger.warning(
                        "cluster: partition %d: a message failed and comes again: %s",
                        partition,
                        str(exc) or type(exc).__name__,
                    )
        if sub is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await sub.unsubscribe()

    async def _handle(self, msg: Any) -> None:
        try:
            data = json.loads(msg.data)
            message_id = str(data["id"])
            message = message_from_wire(data["message"])
        except (ValueError, KeyError, TypeError, WireError) as exc:
            logger.error("cluster: malformed message on %s dropped: %s", msg.subject, exc)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.term()
            return
        self.turns += 1
        sid = message.session.sid
        self._route(sid, str(data.get("gw", "")), message.session.adapter_name)
        delivered = msg.metadata.num_delivered
        if message_id in self._recovered:  # its batch is being redone here: that turn acknowledges it
            self._held[message_id] = (msg, asyncio.ensure_future(self._keep_alive(msg)))
            return
        try:
            if delivered > 1 and await self._redo_begun(sid, message_id):  # a begun batch holds it
                self._held[message_id] = (msg, asyncio.ensure_future(self._keep_alive(msg)))
                return
            if await self.history.seen(sid, message_id):
                # Answered, or parked for a turn: a copy (its worker died before acknowledging, a publish was
                # retried, or the server restarted and forgot an acknowledgement).
                await _ack(msg)
                return
        except (HistoryError, *NATS_ERRORS) as exc:
            logger.warning("cluster: message %s of %s comes again later: %s", message_id, sid, exc)
            await asyncio.sleep(_RETRY_PAUSE)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.nak()
            return
        if delivered > self.cluster.max_deliver:
            logger.error(
                "cluster: message %s of %s failed %d times: reported to its sender", message_id, sid, delivered - 1
            )
            notice = MessageChain(
                [Text(self.config.limits.unanswered_notice.format(message=message.chain.message_repr[:80]))]
            )
            await self.app.send(message.session, notice)
            await _ack(msg)
            return
        self._held[message_id] = (msg, asyncio.ensure_future(self._keep_alive(msg)))
        self._data[message_id] = data
        try:
            received = await self.app.receive(message, inbox_id=message_id)
            if received.turn is not None:
                await asyncio.wait([received.turn])
            elif received.strategy is MessageStrategy.BUFFER:
                await self.history.park(sid, message_id, data)
                await self._acknowledge([message_id])
        finally:
            if message_id in self._held:  # its turn ended without storing (or failed): let it come again
                await self._let_go(message_id)

    async def _drop_ghost(self, partition: int) -> None:
        """After the server came back: a message it counts as unacknowledged on `partition` while this worker holds
        none there is one whose acknowledgement it lost (killed before writing it down). Its one slot would block
        the partition for `ack_wait`; the consumer is reset instead, so it comes again at once and is recognised
        as answered. Called by the partition's loop between messages, so nothing of its own is in flight."""
        self._recheck.discard(partition)
        if any(self.bus.partition_of_subject(m.subject) == partition for m, _ in self._held.values()):
            return  # held here (a batch being redone): not a ghost
        consumer = f"part-{partition}"
        info = await self.bus.js.consumer_info(self.bus.in_stream, consumer)
        if info.num_ack_pending:
            logger.warning(
                "cluster: worker %s: partition %d's server forgot an acknowledgement; reset", self.name, partition
            )
            await self.bus.js.reset_consumer(self.bus.in_stream, consumer)

    async def _keep_alive(self, msg: Any) -> None:
        while True:
            await asyncio.sleep(self.cluster.ack_wait / 3)
            with contextlib.suppress(*NATS_ERRORS):
                await msg.in_progress()

    async def _acknowledge(self, ids: Sequence[str]) -> None:
        """Acknowledge the held messages among `ids` (their turn is stored, or they are dropped or parked)."""
        for message_id in ids:
            held = self._held.pop(message_id, None)
            self._data.pop(message_id, None)
            if held is not None:
                held[1].cancel()
                await _ack(held[0])

    def _route(self, sid: str, gateway: str, adapter_name: str) -> None:
        if gateway:
            self._routes[sid] = gateway
            self._routes.move_to_end(sid)
            if len(self._routes) > _ROUTES_KEPT:
                self._routes.popitem(last=False)
        if adapter_name not in self.app.adapters:
            info = self._gateways.get(gateway, {}).get("adapters", {}).get(adapter_name)
            capabilities = frozenset(info) if info is not None else ALL_ELEMENTS
            self.app.add_adapter(RemoteAdapter(adapter_name, self, capabilities))

    # -- replies --------------------------------------------------------------------------------------------------

    def _gateway_for(self, session: Session) -> str | None:
        gateway = self._routes.get(session.sid)
        if gateway is not None:
            return gateway
        for name, info in self._gateways.items():  # a push to a session this worker has not seen
            if session.adapter_name in info.get("adapters", {}):
                return name
        return None

    async def publish_reply(self, session: Session, chain: MessageChain, reply_id: str | None) -> KiraIMSentResult:
        """Send `chain` through the gateway holding `session`'s connection; see `RemoteAdapter`."""
        if reply_id is not None and not self.owns(session.sid):  # a turn that outlived this worker's lease
            return KiraIMSentResult(
                chain,
                session,
                ok=False,
                error="not sent: the session's partition moved to another worker, which answers it",
            )
        gateway = self._gateway_for(session)
        if gateway is None:
            return KiraIMSentResult(
                chain, session, ok=False, error=f"no gateway serves adapter {session.adapter_name!r}"
            )
        reply_id = reply_id or f"push-{_token()}"
        token = _token()
        waiting = self.cluster.receipt_timeout > 0
        headers = {"Hookchat-Receipt": f"{self.bus.prefix}.receipt.{self.name}.{token}"} if waiting else {}
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        if waiting:
            self._receipts[token] = future
        try:
            data = {"id": reply_id, "session": session_to_wire(session), "chain": chain_to_wire(chain)}
            for attempt in range(20):  # the server may be restarting: the same id never publishes twice
                try:
                    await self.bus.publish(self.bus.out_subject(gateway), data, reply_id, headers)
                    break
                except NATS_ERRORS as exc:
                    if attempt == 19:
                        return KiraIMSentResult(chain, session, ok=False, error=f"cluster unreachable: {exc}")
                    await asyncio.sleep(0.25 * (attempt + 1))
            if not waiting:
                return KiraIMSentResult(chain, session, ok=True)
            try:
                receipt = await asyncio.wait_for(future, self.cluster.receipt_timeout)
            except TimeoutError:
                return KiraIMSentResult(chain, session, ok=True)  # queued for the gateway; its receipt is late
            return KiraIMSentResult(
                chain,
                session,
                ok=bool(receipt.get("ok")),
                message_id=str(receipt.get("message_id") or ""),
                error=receipt.get("error"),
            )
        finally:
            self._receipts.pop(token, None)

    async def _on_receipt(self, msg: Any) -> None:
        future = self._receipts.get(msg.subject.rsplit(".", 1)[-1])
        if future is not None and not future.done():
            with contextlib.suppress(ValueError):
                future.set_result(json.loads(msg.data))


async def _ack(msg: Any) -> None:
    try:
        await msg.ack()
    except NATS_ERRORS as exc:  # redelivered later, and recognised as done by its id
        logger.warning("cluster: acknowledging %s failed: %s", msg.subject, exc)


def _token() -> str:
    return hashlib.blake2b(str((time.time_ns(), id(object()))).encode(), digest_size=9).hexdigest()
