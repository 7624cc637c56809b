"""`hookchat run --role worker`: the pipeline and the plugins, fed by the partitions this worker owns.

The parts, each with one job: `Leases` (which partitions this worker holds, in which `Phase`), `Intake` (each
partition's messages into the pipeline, each settled as an `Outcome`), `HeldMessages` (the messages held
unacknowledged, each settled once), `Recovery` (what a partition's last owner left unanswered), `ClusterTurns`
(each batch written down before its turn), `ReplyRouter` (replies to the gateway holding the session). `Worker`
puts them together and, each heartbeat, takes the partitions rendezvous hashing gives it (`owner_of`).

A message is acknowledged when its turn is stored (`ClusterHistory.append_turn`), when it is dropped (discarded,
stopped), or once parked in the buffers bucket for a later turn; see docs/scale-out.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from core.app import HookChat
from core.builtins import BUILTIN_PLUGINS
from core.cluster._bus import NATS_ERRORS, Bus, default_name
from core.cluster._held import HeldMessages
from core.cluster._intake import Intake
from core.cluster._ownership import Leases, owner_of
from core.cluster._record import WorkerRecord
from core.cluster._recovery import Recovery
from core.cluster._replies import RemoteAdapter, ReplyRouter
from core.cluster._state import ClusterHistory, ClusterPluginStore
from core.cluster._turns import ClusterTurns, TurnLedger
from core.config import HookchatConfig
from core.history import HistoryError
from core.provider import LLMProvider
from core.utils.log import logger
from core.utils.tasks import TaskOwner

__all__ = ["Worker", "RemoteAdapter", "owner_of"]

_SWEEP_EVERY = 8  # heartbeats between sweeps for stranded parked messages
_TIDY_EVERY = 4  # heartbeats between removals of answered messages from the parked buffers (a lease's time)


class Worker:
    """A worker process's parts: the bus, a `HookChat` whose history and plugin stores live in the cluster, and
    the partitions it owns. `async with Worker(config) as worker:` starts it; leaving hands its partitions over."""

    def __init__(
        self,
        config: HookchatConfig,
        *,
        provider: LLMProvider | None = None,
        plugins: Iterable[type | str | Path] = (),
        builtins: Iterable[str] = BUILTIN_PLUGINS,
        entry_points: bool = True,
        name: str | None = None,
    ) -> None:
        self.config: Final = config
        self.cluster: Final = config.cluster
        self.name: Final = name or config.cluster.name or default_name("worker")
        self.bus: Final = Bus(config.cluster, self.name)
        self._tasks: Final = TaskOwner(f"worker {self.name}")
        self.held: Final = HeldMessages(config.cluster.ack_wait, self.bus.partition_of_subject)
        self.leases: Final = Leases(
            self.bus,
            self.name,
            config.cluster.lease_seconds,
            self._tasks,
            wind_down=self._wind_down,
            retaken=self._forget_values,
        )
        self.history: Final = ClusterHistory(
            self.bus,
            max_turns=config.limits.history_turns,
            max_tokens=config.limits.history_tokens,
            done=self.held.acknowledge,
            owns=self.owns,
            confirm=lambda sid: self.leases.confirm(self.bus.partition(sid)),
        )
        self.app: Final = HookChat(
            config,
            provider=provider,
            plugins=[ClusterTurns.of(TurnLedger(self.history, self.held)), *plugins],
            history=self.history,
            builtins=builtins,
            entry_points=entry_points,
        )
        self.app.store_factory = lambda plugin_id: ClusterPluginStore(self.bus, plugin_id)
        self.router: Final = ReplyRouter(self.bus, self.name, config.cluster, self.app, self.owns)
        self.recovery: Final = Recovery(self.app, self.history, self.held, self.router.route, self._tasks, self.name)
        self.intake: Final = Intake(
            self.bus, config, self.app, self.history, self.held, self.recovery, self.router.route, self.name
        )
        self.record: Final = WorkerRecord(config.data.dir / f"cluster-{self.name}.json")
        self.bus.on_connection = lambda up: self.intake.recheck.update(self.leases.consuming()) if up else None
        self._owned_before: set[int] = set()  # partitions this worker's earlier run (same name) owned, not yet back
        self._started_at = time.time()

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, start the app, register, and begin taking partitions."""
        await self.bus.connect()
        try:
            await self.router.start()
            await self.app.start()
            self._owned_before = await self.record.owned_before()
            await self._heartbeat()
        except BaseException:
            await self.aclose()
            raise
        self._tasks.spawn(self._heartbeats(), name="heartbeats")
        self._tasks.spawn(self.leases.renewals(), name="renewals")
        self._tasks.spawn(self.held.keep_alive(), name="keep-alive")
        logger.info("cluster: worker %s started", self.name)

    async def aclose(self) -> None:
        """Stop taking messages, finish the ones in hand, give the partitions up, stop the app, disconnect."""
        await self._tasks.aclose()
        await self.leases.release_all()
        await self.app.aclose()
        with contextlib.suppress(HistoryError, *NATS_ERRORS):
            await self.history.tidy()
        await self.held.let_all_go()
        if self.bus.members is not None:
            with contextlib.suppress(*NATS_ERRORS):
                await self.bus.members.delete(f"worker.{self.name}")
        await self.bus.close()

    async def __aenter__(self) -> Worker:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    @property
    def partitions(self) -> list[int]:
        """The partitions this worker consumes now."""
        return self.leases.consuming()

    @property
    def turns(self) -> int:
        """Messages handled, for `hookchat status`."""
        return self.intake.turns

    def owns(self, sid: str) -> bool:
        """Whether this worker holds the lease of `sid`'s partition (consuming it, or handing it over)."""
        return self.leases.owns(self.bus.partition(sid))

    # -- ownership ------------------------------------------------------------------------------------------------

    async def _heartbeats(self) -> None:
        beats = 0
        while True:
            await asyncio.sleep(self.cluster.lease_seconds / 4)
            beats += 1
            try:
                await self._heartbeat()
                if beats % _TIDY_EVERY == 0:
                    await self.history.tidy()
                if beats % _SWEEP_EVERY == 0:
                    await self.recovery.sweep(self.partitions, lambda p: p in self.leases.consuming())
            except (HistoryError, *NATS_ERRORS) as exc:
                logger.warning("cluster: worker %s heartbeat failed: %s", self.name, str(exc) or type(exc).__name__)

    async def _heartbeat(self) -> None:
        """Register, then take the partitions this worker should own, for at most a quarter of the lease time per
        heartbeat. (Leases are renewed on their own schedule: nothing here may delay them.)"""
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
        self.router.gateways = {g["name"]: g for g in await self.bus.members_of("gateway")}
        workers = [w["name"] for w in await self.bus.members_of("worker")]
        if self.name not in workers:
            workers.append(self.name)
        wanted = {p for p in range(self.cluster.partitions) if owner_of(p, workers) == self.name}
        for partition in self.leases.consuming():
            if partition not in wanted:
                self._tasks.spawn(self.leases.release(partition), name=f"release-{partition}")
        for partition in sorted(wanted - self.leases.held()):
            if time.monotonic() - began > self.cluster.lease_seconds / 4:
                break  # the rest at the next heartbeat
            await self._take(partition)
        await self.record.note_owned(self.partitions)

    async def _take(self, partition: int) -> None:
        began = time.monotonic()
        taken = await self.leases.take(partition)
        if taken is None:
            return
        revision, earlier_run = taken
        if partition in self._owned_before:  # owned by this worker's earlier run (its lease may have expired since)
            self._owned_before.discard(partition)
            earlier_run = True
        self._forget_values(partition)  # another worker may have written its sessions' values since
        # Held before recovery: the turns it queues check that this worker owns their partition when they begin,
        # which they may do while `_reclaim` waits (they were put off as moved, and newer messages overtook them).
        # The partition's messages are taken once recovery has queued the older ones, which keeps their order.
        stop, recovered = asyncio.Event(), asyncio.Event()
        loop = self._tasks.spawn(self._consume_after(recovered, partition, stop), name=f"partition-{partition}")
        self.leases.add(partition, revision, began, loop, stop)
        try:
            await self.recovery.recover(partition)
            if earlier_run:
                await self._reclaim(partition)
        except BaseException:
            loop.cancel()
            await self.leases.release(partition)  # taken again at a later heartbeat
            raise
        finally:
            recovered.set()
        logger.info(
            "cluster: worker %s took partition %d%s",
            self.name,
            partition,
            " back from its earlier run" if earlier_run else "",
        )

    async def _consume_after(self, recovered: asyncio.Event, partition: int, stop: asyncio.Event) -> None:
        await recovered.wait()
        await self.intake.consume(partition, stop)

    async def _reclaim(self, partition: int) -> None:
        """The message this worker's earlier run held unacknowledged on `partition` is delivered again now, not
        after `ack_wait` (JetStream's consumer reset, ADR-60). Safe: no live worker holds it (this one has the
        lease), and a copy of a message already answered is recognised by its id. The reset also clears the
        message's delivery count, so the resets of one message are counted (`WorkerRecord`): past `max_deliver`,
        a message that keeps ending its worker waits `ack_wait` again and is reported to its sender in the end."""
        consumer = f"part-{partition}"
        try:
            info = await self.bus.js.consumer_info(self.bus.in_stream, consumer)
            if not info.num_ack_pending or info.delivered is None:
                return
            count = await self.record.count_reset(partition, info.delivered.stream_seq or 0, self.cluster.max_deliver)
            if count > self.cluster.max_deliver:
                logger.error(
                    "cluster: worker %s: the message it held on partition %d was taken back %d times; "
                    "it waits ack_wait now",
                    self.name,
                    partition,
                    count - 1,
                )
                return
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

    def _forget_values(self, partition: int) -> None:
        """Ownership of `partition` changed: its sessions' values are read from the server again."""
        self.history.forget(partition)

    async def _wind_down(self, partition: int) -> None:
        """Forget this worker's buffers of `partition`'s sessions (they stay parked for the next owner) and wait
        until their turns end (fenced, if the lease was lost: they send and store nothing)."""
        sids = {sid for sid in self.app.buffers.sessions() if self.bus.partition(sid) == partition}
        sids |= {sid for sid in self.app.scheduler.busy() if self.bus.partition(sid) == partition}
        for sid in sids:
            self.app.buffers.drain(sid)
        self.history.forget_parked(sids)
        while any(self.app.scheduler.is_busy(sid) for sid in sids):  # noqa: ASYNC110 - the scheduler has no event
            await asyncio.sleep(0.05)
