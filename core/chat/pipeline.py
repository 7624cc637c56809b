"""From an incoming message to a turn: `im_message` hooks choose a strategy, the session buffer collects messages,
and the turn scheduler runs each session's batches one at a time, in arrival order, under a global cap.

Strategies, applied once every `im_message` hook has run: discard drops the message; trigger makes a batch of it
at once; buffer appends it to the session buffer and fires `message_buffered`; flush drains the buffer plus this
message into one batch. `event.stop()` drops the message and nothing later runs for it.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from core.chat.message_utils import (
    KiraIMMessage,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageStrategy,
)
from core.chat.session import Session
from core.plugin._engine import HookEngine
from core.plugin._log import logger

__all__ = ["SessionBuffers", "TurnScheduler", "MessagePipeline", "TurnResult", "Received"]

_IM_MESSAGE = "im_message"
_MESSAGE_BUFFERED = "message_buffered"


@dataclass
class TurnResult:
    """What one turn did: the messages it sent, whether a hook stopped it, and the error shown, if any."""

    batch: KiraMessageBatchEvent
    sent: list[KiraIMSentResult] = field(default_factory=list)
    stopped: bool = False
    error: str | None = None

    @property
    def chains(self) -> list[Any]:
        """The message chains the turn sent, in order."""
        return [r.chain for r in self.sent]


@dataclass
class Received:
    """What happened to one incoming message: its event, the strategy applied, and the turn it caused (if any)."""

    event: KiraMessageEvent
    strategy: MessageStrategy | None  # None when a hook stopped the message
    turn: asyncio.Future[TurnResult] | None = None


class SessionBuffers:
    """Per-session lists of buffered message events. An empty buffer holds no memory; idle ones can be evicted,
    and at most `max_sessions` sessions hold a buffer (a new one evicts the least recently touched)."""

    def __init__(self, max_sessions: int | None = None) -> None:
        self.max_sessions = max_sessions
        self._buffers: dict[str, list[KiraMessageEvent]] = {}
        self._touched: dict[str, float] = {}  # in order of last touch, oldest first

    def append(self, event: KiraMessageEvent) -> int:
        """Add `event` to its session's buffer; returns the buffer's new size."""
        sid = event.sid
        buffer = self._buffers.get(sid)
        if buffer is None:
            if self.max_sessions is not None and len(self._buffers) >= self.max_sessions:
                oldest = next(iter(self._touched))
                logger.warning("too many buffered sessions (%d): dropped the buffer of %s (%d messages)",
                               self.max_sessions, oldest, len(self.drain(oldest)))
            buffer = self._buffers[sid] = []
        buffer.append(event)
        self._touched.pop(sid, None)
        self._touched[sid] = time.monotonic()
        return len(buffer)

    def remove(self, event: KiraMessageEvent) -> None:
        """Take one event back out of its session's buffer."""
        buffer = self._buffers.get(event.sid)
        if buffer is not None and event in buffer:
            buffer.remove(event)
            if not buffer:
                self.drain(event.sid)

    def drain(self, sid: str) -> list[KiraMessageEvent]:
        """Remove and return everything buffered for `sid`."""
        self._touched.pop(sid, None)
        return self._buffers.pop(sid, [])

    def size(self, sid: str) -> int:
        """How many messages `sid` has buffered."""
        buffer = self._buffers.get(sid)
        return len(buffer) if buffer else 0

    def sessions(self) -> list[str]:
        """Session ids with buffered messages."""
        return list(self._buffers)

    def evict_idle(self, max_idle: float) -> list[str]:
        """Drop buffers untouched for `max_idle` seconds (their messages are discarded, with a log line)."""
        now = time.monotonic()
        stale = [sid for sid, at in self._touched.items() if now - at >= max_idle]
        for sid in stale:
            dropped = self.drain(sid)
            logger.info("evicted idle buffer of %s (%d messages dropped)", sid, len(dropped))
        return stale

    def __len__(self) -> int:
        return len(self._buffers)


class TurnScheduler:
    """Runs turns: one at a time per session in arrival order; sessions concurrently, at most `max_concurrent`.

    Each busy session has one worker task (owned by the scheduler, cancelled by `aclose`); an idle session keeps
    no state here.
    """

    def __init__(self, run_turn: Callable[[KiraMessageBatchEvent], Awaitable[TurnResult]], max_concurrent: int = 64):
        self._run_turn = run_turn
        self._limit = asyncio.Semaphore(max_concurrent) if max_concurrent else None
        self._queues: dict[str, deque[tuple[KiraMessageBatchEvent, asyncio.Future[TurnResult]]]] = {}
        self._workers: set[asyncio.Task[None]] = set()
        self._closed = False

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        """Queue a batch for its session; the future resolves to the turn's result (cancelled once closed)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[TurnResult] = loop.create_future()
        if self._closed:
            logger.warning("turn of %s refused: the bot is shutting down", batch.sid)
            future.cancel()
            return future
        queue = self._queues.get(batch.sid)
        if queue is not None:
            queue.append((batch, future))
            return future
        self._queues[batch.sid] = deque([(batch, future)])
        worker = loop.create_task(self._drain(batch.sid), name=f"turns:{batch.sid}")
        self._workers.add(worker)
        worker.add_done_callback(self._workers.discard)
        return future

    async def _drain(self, sid: str) -> None:
        queue = self._queues[sid]
        try:
            while queue:
                batch, future = queue[0]
                try:
                    if self._limit is None:
                        result = await self._run_turn(batch)
                    else:
                        async with self._limit:
                            result = await self._run_turn(batch)
                except Exception as exc:  # the agent loop reports its own failures; this is a last resort
                    logger.exception("turn of %s failed", sid)
                    if not future.done():
                        future.set_exception(exc)
                else:
                    if not future.done():
                        future.set_result(result)
                queue.popleft()
        finally:
            for _, future in queue:
                future.cancel()
            del self._queues[sid]

    def busy_sessions(self) -> int:
        """Sessions with a turn running or queued."""
        return len(self._queues)

    async def join(self) -> None:
        """Wait until every queued turn has finished."""
        while self._workers:
            await asyncio.gather(*list(self._workers), return_exceptions=True)

    async def aclose(self) -> None:
        """Cancel every running and queued turn, and refuse new ones."""
        self._closed = True
        workers = list(self._workers)
        for worker in workers:
            worker.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


class MessagePipeline:
    """Receives platform messages, runs the `im_message` stage and the strategies, and feeds the turn scheduler."""

    def __init__(
        self,
        engine: HookEngine,
        scheduler: TurnScheduler,
        capabilities: Callable[[Session], Any],
        *,
        max_buffered_sessions: int | None = None,
    ) -> None:
        self.engine = engine
        self.scheduler = scheduler
        self.buffers = SessionBuffers(max_buffered_sessions)
        self._capabilities = capabilities

    async def receive(self, message: KiraIMMessage) -> Received:
        """Run one incoming message through `im_message` and its strategy."""
        event = KiraMessageEvent(message)
        await self.engine.dispatch(_IM_MESSAGE, event)
        if event.is_stopped:
            return Received(event, None)
        strategy = event.strategy
        if strategy is MessageStrategy.DISCARD:
            return Received(event, strategy)
        if strategy is MessageStrategy.TRIGGER:
            return Received(event, strategy, self._submit([event], message.session))
        if strategy is MessageStrategy.BUFFER:
            self.buffers.append(event)
            await self.engine.dispatch(_MESSAGE_BUFFERED, event)
            if event.is_stopped:
                # A message_buffered hook stopped it: it leaves the buffer and nothing later happens to it.
                self.buffers.remove(event)
                return Received(event, None)
            return Received(event, strategy)
        # FLUSH
        messages = self.buffers.drain(message.session.sid)
        messages.append(event)
        return Received(event, strategy, self._submit(messages, message.session))

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Turn everything buffered for `session` into one batch now (the debounce timer calls this)."""
        sid = session if isinstance(session, str) else session.sid
        messages = self.buffers.drain(sid)
        if not messages:
            return None
        return self._submit(messages, messages[-1].session)

    def _submit(self, messages: list[KiraMessageEvent], session: Session) -> asyncio.Future[TurnResult]:
        batch = KiraMessageBatchEvent(messages, session)
        batch.capabilities = self._capabilities(session)
        return self.scheduler.submit(batch)
