"""Before a worker's turn runs, its batch is written down in the cluster (`ClusterHistory.intend`), so whoever
redoes it after a crash forms the same batch and its replies carry the same ids. `ClusterTurns` is the plugin that
does it first of all `im_batch_message` hooks; it sees the worker only as a `BatchLedger`."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

from core.chat import KiraMessageBatchEvent
from core.cluster._held import HeldMessages
from core.cluster._state import PATIENCE, ClusterHistory
from core.history import HistoryError
from core.plugin import BasePlugin, on
from core.utils.log import logger

__all__ = ["BatchLedger", "ClusterTurns", "TurnLedger"]

_FIRST = 1_000  # above every named priority: the batch is written down before any other hook sees the turn


class BatchLedger(Protocol):
    """Where a turn's batch is written down before it runs."""

    async def begin(self, event: KiraMessageBatchEvent) -> bool:
        """Write the batch down; False when that failed and the turn must not run."""
        ...


class TurnLedger:
    """The worker's `BatchLedger`: the batch goes beside the parked messages in `history`'s buffers bucket, with
    the data of the held messages not parked yet."""

    def __init__(self, history: ClusterHistory, held: HeldMessages) -> None:
        self.history = history
        self.held = held

    async def begin(self, event: KiraMessageBatchEvent) -> bool:
        """See `BatchLedger.begin`. A batch that could not be written down leaves its messages parked and held
        (`history.abandoned`): the partition's next owner, or this worker's sweep, answers them.

        A batch of just the one held message that the hooks sent on as it arrived, nothing of its session parked,
        is not written down (a round trip less per turn): after a crash it is delivered again, with nothing parked
        or buffered for its session as now, and the same hooks send it on into the same batch, whose replies carry
        the same ids. Not a message flushed from the buffer: its park may still be in flight, and once parked and
        acknowledged it would be answered again in another batch."""
        ids = [m.inbox_id for m in event.messages if m.inbox_id]
        if not ids:
            return True
        if len(ids) == 1 and self.held.went_on_at_once(ids[0]) and not await self.history.has_parked(event.sid):
            return True
        unparked = {i: data for i in ids if (data := self.held.data(i)) is not None}
        try:
            await self.history.intend(event.sid, ids, unparked)
        except HistoryError as exc:  # no turn may send what a redo could not match
            logger.warning("cluster: turn of %s put off: %s", event.sid, exc)
            self.history.abandoned.update(ids)
            return False
        return True


class ClusterTurns(BasePlugin):
    """Writes each turn's batch down in the cluster before the turn runs. A worker loads `ClusterTurns.of(ledger)`,
    the class bound to its ledger (the loader builds plugins from classes, so the ledger rides on the class)."""

    ledger: ClassVar[BatchLedger]

    @classmethod
    def of(cls, ledger: BatchLedger) -> type[ClusterTurns]:
        """This plugin, writing batches down in `ledger`."""
        return type(cls.__name__, (cls,), {"ledger": ledger, "__doc__": cls.__doc__})

    @on.im_batch_message(priority=_FIRST, deadline=PATIENCE + 60)
    async def record_batch(self, event: KiraMessageBatchEvent, *args: Any, **kwargs: Any) -> None:
        """The batch is written down, or the turn is stopped."""
        if not await self.ledger.begin(event):
            event.stop()
