"""Which partitions a worker holds: rendezvous hashing says which it should own (`owner_of`), and a lease in the
leases bucket says which it may consume. Each held partition is a `Lease` in one `Phase`, whose transitions
`Lease.enter` checks; `Leases` takes, renews, hands over and loses them."""

from __future__ import annotations

import asyncio
import contextlib
import enum
import hashlib
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import nats.errors
import nats.js.errors
from nats.js.kv import KeyValue

from core.cluster._bus import NATS_ERRORS, Bus
from core.utils.log import logger
from core.utils.tasks import TaskOwner

__all__ = ["Lease", "Leases", "Phase", "owner_of"]

_RENEW_PAUSE = 0.05  # seconds between attempts to renew a lease while the server does not answer


def owner_of(partition: int, workers: Sequence[str]) -> str | None:
    """The worker that should own `partition` among `workers` (rendezvous hashing); None when there are none."""
    if not workers:
        return None
    return max(workers, key=lambda w: hashlib.blake2b(f"{partition}:{w}".encode(), digest_size=8).digest())


class Phase(enum.Enum):
    """Where a held partition is. CONSUMING: the lease is this worker's and its loop fetches. RELEASING: handing
    it over (the loop stopped, its turns finish, the lease is still renewed, then deleted). STOPPING: the lease
    expired and may be another's (the loop and turns stop, fenced: they send and store nothing)."""

    CONSUMING = "consuming"
    RELEASING = "releasing"
    STOPPING = "stopping"


_NEXT: dict[Phase, frozenset[Phase]] = {
    Phase.CONSUMING: frozenset({Phase.RELEASING, Phase.STOPPING}),
    Phase.RELEASING: frozenset(),  # then forgotten, once the lease is deleted
    Phase.STOPPING: frozenset(),  # then forgotten, once its turns have ended
}


@dataclass
class Lease:
    """One partition this worker holds: the lease's revision, when its last renewal that succeeded was sent
    (monotonic; None once it is no longer consuming), and the loop that consumes it with the event that stops it."""

    partition: int
    revision: int
    renewed: float | None
    loop: asyncio.Task[None]
    stop: asyncio.Event
    phase: Phase = Phase.CONSUMING

    def enter(self, phase: Phase) -> None:
        """Move to `phase`; only CONSUMING -> RELEASING and CONSUMING -> STOPPING exist."""
        if phase not in _NEXT[self.phase]:
            raise AssertionError(f"partition {self.partition}: no way from {self.phase.value} to {phase.value}")
        self.phase = phase
        self.renewed = None
        self.stop.set()


class Leases:
    """The partitions this worker holds (at most one `Lease` each) and their leases on the server.

    `wind_down(partition)` is the worker's: forget the partition's buffers and wait until its sessions' turns end.
    `retaken(partition)` is called when a lease that expired while the server was away is written again."""

    def __init__(
        self,
        bus: Bus,
        name: str,
        lease_seconds: float,
        tasks: TaskOwner,
        *,
        wind_down: Callable[[int], Awaitable[None]],
        retaken: Callable[[int], None],
    ) -> None:
        self.bus = bus
        self.name = name
        self.lease_seconds = lease_seconds
        self._tasks = tasks
        self._wind_down = wind_down
        self._retaken = retaken
        self._held: dict[int, Lease] = {}

    def owns(self, partition: int) -> bool:
        """Whether this worker holds `partition`'s lease (consuming it, or handing it over)."""
        lease = self._held.get(partition)
        return lease is not None and lease.phase is not Phase.STOPPING

    def consuming(self) -> list[int]:
        """The partitions this worker consumes now, sorted."""
        return sorted(p for p, lease in self._held.items() if lease.phase is Phase.CONSUMING)

    def held(self) -> set[int]:
        """Every partition held in any phase: none of them may be taken again until it is forgotten."""
        return set(self._held)

    def add(self, partition: int, revision: int, taken_at: float, loop: asyncio.Task[None], stop: asyncio.Event):
        """A partition whose lease `take` got, now consumed by `loop`."""
        assert partition not in self._held, f"partition {partition} is held already"
        self._held[partition] = Lease(partition, revision, taken_at, loop, stop)

    # -- the server's side ----------------------------------------------------------------------------------------

    @property
    def _kv(self) -> KeyValue:
        assert self.bus.leases is not None, "the bus is not connected"
        return self.bus.leases

    async def confirm(self, partition: int) -> bool:
        """Whether the server still has this worker as `partition`'s owner: asked before a message is parked and
        before a turn begins, so a worker that stalled past its lease does not act for the new owner. Within half
        a lease of a renewal that succeeded, the lease cannot have expired: no need to ask."""
        lease = self._held.get(partition)
        if (
            lease is not None
            and lease.renewed is not None
            and time.monotonic() - lease.renewed < self.lease_seconds / 2
        ):
            return True
        try:
            entry = await self._kv.get(f"p{partition}")
        except nats.js.errors.KeyNotFoundError:
            entry = None
        if entry is not None and entry.value == self.name.encode():
            return True
        self.lose(partition)  # at once, not at the next renewal: the partition's messages go to its owner
        return False

    async def take(self, partition: int) -> tuple[int, bool] | None:
        """Write `partition`'s lease: its revision, and whether it was this worker's from an earlier run under the
        same name (which is gone: names are unique); None while another worker holds it."""
        assert partition not in self._held
        key = f"p{partition}"
        try:
            return await self._kv.create(key, self.name.encode()), False
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        try:
            entry = await self._kv.get(key)
        except nats.js.errors.KeyNotFoundError:
            return None
        if entry.value != self.name.encode():  # another worker still holds it: wait for it to expire or go
            return None
        revision = await self._renew(partition, entry.revision or 0)  # renewed now: it expires earlier than a new one
        return (revision, True) if revision is not None else None

    async def renewals(self) -> None:
        """Renew every lease held each sixth of `lease_seconds`: a lease then outlives an outage of the server of
        up to about five sixths of it (each attempt is bounded, and retried at once until the server answers)."""
        while True:
            await asyncio.sleep(self.lease_seconds / 6)
            leases = [lease for lease in self._held.values() if lease.phase is not Phase.STOPPING]
            renewed = await asyncio.gather(*(self._renew_patiently(lease) for lease in leases))
            for lease, (revision, sent) in zip(leases, renewed, strict=True):
                if self._held.get(lease.partition) is not lease or lease.phase is Phase.STOPPING:
                    continue  # lost (and perhaps taken again) meanwhile
                if revision is not None:
                    lease.revision = revision
                    if lease.phase is Phase.CONSUMING:
                        lease.renewed = sent
                elif lease.phase is Phase.CONSUMING:
                    self.lose(lease.partition)

    async def _renew_patiently(self, lease: Lease) -> tuple[int | None, float]:
        """Renew one lease, each attempt bounded by a twelfth of `lease_seconds` and retried at once, until the
        server answers or the lease has certainly expired. Returns the new revision (None: lost) and when the
        attempt that succeeded was sent."""
        last = lease.renewed if lease.renewed is not None else time.monotonic()
        while True:
            sent = time.monotonic()
            try:
                if not self.bus.nc.is_connected:  # nothing would reach the server; nats-py would buffer it
                    raise nats.errors.ConnectionReconnectingError
                revision = await asyncio.wait_for(self._renew(lease.partition, lease.revision), self.lease_seconds / 12)
                return revision, sent
            except (TimeoutError, *NATS_ERRORS) as exc:
                if sent - last > self.lease_seconds:
                    logger.warning(
                        "cluster: worker %s could not renew partition %d's lease for %.1f s: %s",
                        self.name,
                        lease.partition,
                        sent - last,
                        str(exc) or type(exc).__name__,
                    )
                    return None, sent
                await asyncio.sleep(_RENEW_PAUSE)

    async def _renew(self, partition: int, revision: int) -> int | None:
        """The lease's new revision, or None when another worker holds it now."""
        key = f"p{partition}"
        try:  # the bus's lean write, not nats-py's update: every lease is renewed each sixth of `lease_seconds`
            return await self.bus.write(self._kv, key, self.name.encode(), revision)
        except nats.js.errors.KeyWrongLastSequenceError:
            pass
        try:  # an earlier renewal may have been stored with its answer lost (the server restarting)
            entry = await self._kv.get(key)
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
        lease = self._held.get(partition)
        last = lease.renewed if lease is not None else None
        if last is None or time.monotonic() - last > self.lease_seconds * 1.125:  # a margin under 1.25
            return None
        try:
            revision = await self._kv.create(f"p{partition}", self.name.encode())
        except nats.js.errors.KeyWrongLastSequenceError:
            return None  # another worker took it
        logger.warning("cluster: worker %s wrote partition %d's lease again after it expired", self.name, partition)
        self._retaken(partition)
        return revision

    # -- letting go -----------------------------------------------------------------------------------------------

    async def release(self, partition: int) -> None:
        """Hand `partition` over: stop consuming, let its turns finish, then delete the lease."""
        lease = self._held.get(partition)
        if lease is None or lease.phase is not Phase.CONSUMING:
            return
        lease.enter(Phase.RELEASING)
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await lease.loop
            await self._wind_down(partition)
            with contextlib.suppress(*NATS_ERRORS):
                await self._kv.delete(f"p{partition}", last=lease.revision)
        finally:
            if self._held.get(partition) is lease:
                del self._held[partition]
        logger.info("cluster: worker %s gave partition %d up", self.name, partition)

    async def release_all(self) -> None:
        """Hand every partition consumed now over, together."""
        await asyncio.gather(*(self.release(p) for p in self.consuming()), return_exceptions=True)

    def lose(self, partition: int) -> None:
        """The lease expired (this worker stalled past `lease_seconds`, or the server was away that long) and may be
        another worker's: stop at once; the partition is taken again if it is still this worker's to own."""
        lease = self._held.get(partition)
        if lease is None or lease.phase is not Phase.CONSUMING:
            return
        lease.enter(Phase.STOPPING)
        self._tasks.spawn(self._stop(lease), name=f"lost-{partition}")
        logger.warning("cluster: worker %s lost partition %d (its lease expired)", self.name, partition)

    async def _stop(self, lease: Lease) -> None:
        try:
            # Cancelled here, not in `lose`, which the loop itself may be calling; and as well as the stop event:
            # Python 3.11's `wait_for` (in nats-py's fetch) can swallow a cancellation.
            lease.loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await lease.loop
            await self._wind_down(lease.partition)
        finally:
            if self._held.get(lease.partition) is lease:
                del self._held[lease.partition]
