"""From an incoming message to a turn: `im_message` hooks choose a strategy, the session buffer collects messages,
and the turn scheduler runs each session's batches one at a time, in arrival order, under a global cap.

Strategies, applied once every `im_message` hook has run: discard drops the message; trigger makes a batch of it
at once; buffer appends it to the session buffer and fires `message_buffered`; flush drains the buffer plus this
message into one batch. `event.stop()` drops the message and nothing later runs for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from core.chat import (
    Group,
    KiraIMMessage,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    MessageStrategy,
    Received,
    Session,
    SessionBuffers,
    TurnResult,
    User,
)
from core.chat.message_elements import Text
from core.history import SessionHistory
from core.plugin import HookEngine
from core.utils.clock import Clock, LoopClock
from core.utils.log import logger
from core.utils.signals import hook_stuck
from core.utils.tasks import SHUTDOWN_GRACE, TaskOwner
from core.utils.text import valid_text

__all__ = ["TurnScheduler", "MessagePipeline", "inbox_record", "message_from_inbox"]

_IM_MESSAGE = "im_message"


def origin(message: KiraIMMessage) -> tuple[Session, User]:
    """The session and sender of a received message; a message without them cannot be answered (ValueError)."""
    if message.session is None or message.sender is None:
        raise ValueError(
            f"a received message needs its session and sender (message {message.message_id!r}): the adapter that "
            "built it must set both"
        )
    return message.session, message.sender


def inbox_record(message: KiraIMMessage) -> dict[str, object]:
    """What the inbox keeps of a message: enough to answer it after a restart (its text, sender, session)."""
    session, sender = origin(message)
    return {
        "text": message.message_repr,
        "user_id": sender.user_id,
        "nickname": sender.nickname,
        "adapter": session.adapter_name,
        "type": session.session_type,
        "id": session.session_id,
        "group_id": message.group.group_id if message.group else None,
        "message_id": message.message_id,
        "is_mentioned": message.is_mentioned,
    }


def message_from_inbox(data: dict[str, Any], received_at: float) -> KiraIMMessage:
    """The message an inbox record describes (its content as text), to answer it after a restart."""
    return KiraIMMessage(
        MessageChain([Text(str(data.get("text", "")))]),
        User(str(data.get("user_id", "")), str(data.get("nickname") or "")),
        Session(str(data["adapter"]), str(data["type"]), str(data["id"])),
        group=Group(str(data["group_id"])) if data.get("group_id") else None,
        message_id=str(data.get("message_id") or ""),
        is_mentioned=bool(data.get("is_mentioned")),
        timestamp=received_at,
    )


def _make_valid(message: KiraIMMessage) -> None:
    """Replace lone surrogates in the message's text fields (elements, sender's name) in place: a platform may
    deliver one, and it would otherwise break the history insert and every send that echoes it."""
    for element in message.chain:
        for name, value in getattr(element, "__dict__", {}).items():
            if isinstance(value, str) and not value.isascii():
                setattr(element, name, valid_text(value))
    _, sender = origin(message)
    if sender.nickname and not sender.nickname.isascii():
        message.sender = dataclasses.replace(sender, nickname=valid_text(sender.nickname))


_MESSAGE_BUFFERED = "message_buffered"


class _Queued:
    """A batch in a session's queue and the futures of everyone who submitted messages to it."""

    __slots__ = ("batch", "futures", "started", "joinable")

    def __init__(self, batch: KiraMessageBatchEvent, future: asyncio.Future[TurnResult], joinable: bool) -> None:
        self.batch = batch
        self.futures = [future]
        self.started = False
        self.joinable = joinable  # messages as they arrived (not a batch made elsewhere): later arrivals may join

    def cancel(self) -> None:
        for future in self.futures:
            future.cancel()


class TurnScheduler:
    """Runs turns: one at a time per session in arrival order; sessions concurrently, at most `max_concurrent`.

    A session has at most one running and one waiting batch of arriving messages: a batch submitted with
    `join=True` (the pipeline's, of messages as they arrive) joins the one such batch that waits, so a flood into
    one session makes one turn of everything that came during the running one, not a turn per message. A batch
    made elsewhere (a push that asks for an answer, a recovered or redone batch, a plugin's) is a turn of its own,
    kept as it was made. At most `max_waiting` messages wait per session (None: unbounded); past it the rest of an
    arriving batch are refused: `forget` is
    called with them, and `overflow(session, limit)` (awaited in a task of the scheduler) once per filling of the
    waiting batch, to tell the session. `forget(batch, why)` is also called for a batch that will not be answered
    because the user said so: its running turn cancelled by `cancel()`, every submitter's future cancelled before
    it started, or dropped by `drop_waiting()`. A batch interrupted by `aclose()` is not forgotten (it is answered
    after a restart).

    Each busy session has one worker task (owned by the scheduler, cancelled by `aclose`); an idle session keeps
    no state here. A worker blocked in a hook that ignored its cancellation (the engine's `hook_stuck` signal) is
    abandoned: its turn's future is cancelled and a new worker runs the session's later turns; the old one, if
    its hook ever returns, ends without touching the session.
    """

    def __init__(
        self,
        run_turn: Callable[[KiraMessageBatchEvent], Awaitable[TurnResult]],
        max_concurrent: int = 64,
        *,
        max_waiting: int | None = None,
        forget: Callable[[KiraMessageBatchEvent, str], None] | None = None,
        overflow: Callable[[Session, int], Coroutine[Any, Any, None]] | None = None,
    ):
        self._run_turn = run_turn
        self._limit = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self.max_waiting = max_waiting
        self._forget = forget
        self._overflow = overflow
        self._queues: dict[str, deque[_Queued]] = {}
        self._workers = TaskOwner("the turn scheduler")
        self._running: dict[str, asyncio.Task[None]] = {}  # session -> its worker, while a turn runs
        self._cancelling: set[asyncio.Task[None]] = set()  # workers whose running turn `cancel()` asked to end
        #: Sessions whose waiting batch is full, and how many messages were refused since (until it starts): the
        #: session is told and the log says so once per filling, not per message.
        self._overflowed: dict[str, int] = {}
        self._slots: set[asyncio.Task[None]] = set()  # workers whose turn holds a slot of `max_concurrent`
        hook_stuck.connect(self._abandon_stuck)  # held weakly: gone with the scheduler

    def submit(self, batch: KiraMessageBatchEvent, *, join: bool = False) -> asyncio.Future[TurnResult]:
        """Queue a batch for its session; with `join`, its messages join the arriving messages that wait, if any,
        within `max_waiting`. The future resolves to the result of the turn that answers it (cancelled once
        closed, or when all of it was refused)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TurnResult] = loop.create_future()
        if self._workers.closing:
            logger.warning("turn of %s refused: the bot is shutting down", batch.sid)
            future.cancel()
            return future
        sid = batch.sid
        queue = self._queues.get(sid)
        refused = self._take_room(sid, queue, batch) if join else []
        if refused:
            self._refuse(batch.session, refused)
            if not batch.messages:
                future.cancel()
                return future
        if queue is None:
            self._start_worker(sid, deque([_Queued(batch, future, join)]))
            return future
        waiting = queue[-1] if queue else None
        if join and waiting is not None and waiting.joinable and not waiting.started:
            waiting.batch.messages.extend(batch.messages)
            waiting.futures.append(future)
        else:
            queue.append(_Queued(batch, future, join))
        return future

    def batches(self, sid: str) -> int:
        """How many batches session `sid` has running or waiting (of arriving messages only: at most two)."""
        return len(self._queues.get(sid, ()))

    def waiting(self, sid: str) -> int:
        """How many messages of session `sid` wait for a turn (not counting the turn running now)."""
        return sum(len(q.batch.messages) for q in self._queues.get(sid, ()) if not q.started)

    def _take_room(
        self, sid: str, queue: deque[_Queued] | None, batch: KiraMessageBatchEvent
    ) -> list[KiraMessageEvent]:
        """Cut `batch` to the room left under `max_waiting`; returns the messages that did not fit."""
        if self.max_waiting is None:
            return []
        room = self.max_waiting - (self.waiting(sid) if queue is not None else 0)
        if len(batch.messages) <= room:
            return []
        refused = batch.messages[max(room, 0) :]
        del batch.messages[max(room, 0) :]
        return refused

    def _refuse(self, session: Session, refused: list[KiraMessageEvent]) -> None:
        if self._forget is not None:
            self._forget(KiraMessageBatchEvent(refused, session), "refused: the session's waiting batch was full")
        sid = session.sid
        if sid in self._overflowed:
            self._overflowed[sid] += len(refused)
            return
        self._overflowed[sid] = len(refused)
        logger.warning(
            "messages of %s refused: %d already wait for an answer ([limits] max_waiting_messages); the "
            "session is told",
            sid,
            self.max_waiting,
        )
        if self._overflow is not None:
            self._workers.spawn(self._overflow(session, self.max_waiting or 0), name=f"overflow:{sid}")

    def _end_overflow(self, sid: str) -> None:
        refused = self._overflowed.pop(sid, 0)
        if refused:
            logger.warning("%d message(s) of %s were refused while its waiting batch was full", refused, sid)

    def _start_worker(self, sid: str, queue: deque[_Queued]) -> None:
        self._queues[sid] = queue
        self._workers.spawn(self._drain(sid, queue), name=f"turns:{sid}")

    async def _drain(self, sid: str, queue: deque[_Queued]) -> None:
        worker = asyncio.current_task()
        assert worker is not None
        try:
            while queue:
                entry = queue[0]
                batch = entry.batch
                if all(f.cancelled() for f in entry.futures):  # everyone took it back before it started
                    queue.popleft()
                    self._forgotten(batch, "taken back before it started")
                    continue
                entry.started = True
                self._end_overflow(sid)
                self._running[sid] = worker
                try:
                    if self._limit is not None:
                        await self._limit.acquire()
                        self._slots.add(worker)
                    result = await self._run_turn(batch)
                except asyncio.CancelledError:
                    # `cancel(sid)` ends this turn only: the session's later turns still run. Any other
                    # cancellation (the scheduler closing, or one from outside alongside) ends the worker.
                    if worker not in self._cancelling:
                        raise
                    self._cancelling.discard(worker)
                    if worker.uncancel() != 0:
                        raise
                    entry.cancel()
                    self._forgotten(batch, "cancelled")
                except Exception as exc:  # the agent loop reports its own failures; this is a last resort
                    logger.exception("turn of %s failed", sid)
                    for future in entry.futures:
                        if not future.done():
                            future.set_exception(exc)
                else:
                    for future in entry.futures:
                        if not future.done():
                            future.set_result(result)
                finally:
                    self._release_slot(worker)
                    if self._running.get(sid) is worker:
                        del self._running[sid]
                    if worker in self._cancelling:  # the turn swallowed its cancellation: undo the request
                        self._cancelling.discard(worker)
                        worker.uncancel()
                queue.popleft()
        finally:
            self._cancelling.discard(worker)
            for entry in queue:
                entry.cancel()
            if self._queues.get(sid) is queue:  # not when this worker was abandoned: the queue is another's now
                del self._queues[sid]
                self._end_overflow(sid)

    def _abandon_stuck(
        self, _engine: object, *, task: object, plugin_id: str, hook_name: str, event_name: str, **_: object
    ) -> None:
        """`hook_stuck`: if `task` is one of this scheduler's workers, abandon its turn and move the session on."""
        sid = next((s for s, worker in self._running.items() if worker is task), None)
        if sid is None:
            return
        queue = self._queues[sid]
        stuck = queue.popleft()
        later = deque(queue)
        queue.clear()
        queue.append(stuck)  # the old worker keeps only its stuck turn
        del self._running[sid]
        del self._queues[sid]
        self._release_slot(task)  # the stuck turn no longer counts against max_concurrent
        stuck.cancel()
        logger.error(
            "turn of %s abandoned: plugin %r hook %s (%s) ignored its cancellation; the session goes on "
            "with its next turn",
            sid,
            plugin_id,
            hook_name,
            event_name,
        )
        if later:
            self._start_worker(sid, later)

    def _forgotten(self, batch: KiraMessageBatchEvent, why: str) -> None:
        logger.info("turn of %s %s: its %d message(s) will not be answered", batch.sid, why, len(batch.messages))
        if self._forget is not None:
            self._forget(batch, why)

    def drop_waiting(self, sid: str) -> int:
        """Drop the batches of `sid` that wait (not the running one), as `/reset` does: their futures are cancelled
        and `forget` is called for each. Returns how many messages they held."""
        queue = self._queues.get(sid)
        if not queue:
            return 0
        kept = [entry for entry in queue if entry.started]
        dropped = [entry for entry in queue if not entry.started]
        queue.clear()
        queue.extend(kept)
        for entry in dropped:
            entry.cancel()
            self._forgotten(entry.batch, "dropped by a reset")
        return sum(len(entry.batch.messages) for entry in dropped)

    def _release_slot(self, worker: object) -> None:
        """Give back the concurrency slot `worker`'s turn holds, once (its end and its abandonment both call this)."""
        if worker in self._slots:
            self._slots.discard(worker)
            assert self._limit is not None
            self._limit.release()

    def cancel(self, sid: str) -> bool:
        """Cancel the turn running for session `sid` (a stop button, Ctrl-C): its future is cancelled, and the
        session's queued turns still run. False when no turn of `sid` is running.

        Safe because the loop is single-threaded: while `sid` has a running turn, its worker is suspended at an
        await inside that turn, which is where the cancellation lands."""
        worker = self._running.get(sid)
        if worker is None or worker in self._cancelling:
            return False
        self._cancelling.add(worker)
        worker.cancel()
        return True

    def is_busy(self, sid: str) -> bool:
        """Whether session `sid` has a turn running or queued."""
        return sid in self._queues

    def busy(self) -> list[str]:
        """The sessions with a turn running or queued."""
        return list(self._queues)

    def busy_sessions(self) -> int:
        """Sessions with a turn running or queued."""
        return len(self._queues)

    async def join(self) -> None:
        """Wait until every queued turn has finished."""
        await self._workers.join()

    async def aclose(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Cancel every running and queued turn, and refuse new ones; a turn still running `grace` seconds after
        its cancellation is abandoned."""
        await self._workers.aclose(grace)


class MessagePipeline:
    """Receives platform messages, runs the `im_message` stage and the strategies, and feeds the turn scheduler."""

    def __init__(
        self,
        engine: HookEngine,
        scheduler: TurnScheduler,
        capabilities: Callable[[Session], frozenset[str]],
        *,
        max_buffered_sessions: int | None = None,
        clock: Clock | None = None,
        inbox: SessionHistory | None = None,
    ) -> None:
        #: Where every received message is recorded before anything happens to it (the history database).
        self.inbox = inbox
        self.engine = engine
        self.scheduler = scheduler
        self.buffers = SessionBuffers(max_buffered_sessions, clock=(clock or LoopClock()).now)
        self._capabilities = capabilities

    async def receive(self, message: KiraIMMessage, *, inbox_id: str | None = None) -> Received:
        """Run one incoming message through `im_message` and its strategy (its text made valid Unicode first).

        `inbox_id`: the message is already held durably under this id (a cluster worker's JetStream message), so
        the inbox is not written; the id is marked done like an inbox row."""
        _make_valid(message)
        session, _ = origin(message)
        event = KiraMessageEvent(message)
        if inbox_id is not None:
            event.inbox_id = inbox_id
        elif self.inbox is not None:
            sid, record = session.sid, inbox_record(message)
            event.inbox_id = self.inbox.record_received(sid, record, message.timestamp)
        with self.engine.tracer.message(event):  # trace: the message's hooks, until a turn adopts it
            return await self._receive(event, session)

    async def _receive(self, event: KiraMessageEvent, session: Session) -> Received:
        await self.engine.dispatch(_IM_MESSAGE, event)
        if event.is_stopped:
            self._done(event)
            return Received(event, None)
        strategy = event.strategy
        if strategy is MessageStrategy.DISCARD:
            self._done(event)
            return Received(event, strategy)
        if strategy is MessageStrategy.TRIGGER:
            return Received(event, strategy, self._submit([event], session))
        if strategy is MessageStrategy.BUFFER:
            self.buffers.append(event)
            await self.engine.dispatch(_MESSAGE_BUFFERED, event)
            if event.is_stopped:
                # A message_buffered hook stopped it: it leaves the buffer and nothing later happens to it.
                self.buffers.remove(event)
                self._done(event)
                return Received(event, None)
            return Received(event, strategy)
        # FLUSH
        messages = self.buffers.drain(session.sid)
        messages.append(event)
        return Received(event, strategy, self._submit(messages, session))

    def _done(self, event: KiraMessageEvent) -> None:
        """A message no turn will answer (discarded, stopped) leaves the inbox: nothing to recover after a crash."""
        if self.inbox is not None and event.inbox_id is not None:
            self.inbox.mark_done([event.inbox_id])

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Turn everything buffered for `session` into one batch now (the debounce timer calls this)."""
        sid = session if isinstance(session, str) else session.sid
        messages = self.buffers.drain(sid)
        if not messages:
            return None
        return self._submit(messages, messages[-1].session)

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        """Queue `batch` as a turn of its own for its session (the batch learns what its adapter can send)."""
        return self._queue(batch, join=False)

    def _submit(self, messages: list[KiraMessageEvent], session: Session) -> asyncio.Future[TurnResult]:
        """Arriving messages: they join the session's waiting batch, if one waits."""
        return self._queue(KiraMessageBatchEvent(messages, session), join=True)

    def _queue(self, batch: KiraMessageBatchEvent, *, join: bool) -> asyncio.Future[TurnResult]:
        if batch.capabilities is None:
            batch.capabilities = self._capabilities(batch.session)
        return self.scheduler.submit(batch, join=join)
