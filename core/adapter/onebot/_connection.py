"""One live WebSocket to a OneBot v11 implementation: reads its frames, and matches each action's answer to the
call that is waiting for it by `echo`, with a deadline.

Events are handed to a callback as they arrive (the adapter queues them, bounded); when the callback answers with a
future (the queue is full), no frame is read until it resolves, so the implementation is held back (TCP's flow
control) rather than anything dropped. A malformed frame is logged and skipped; a frame above `max_size` makes the websockets library close the connection (1009), and the dialer or the
implementation reconnects.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import json.encoder
import logging
from collections.abc import Callable
from typing import Any

from pydantic import ValidationError
from websockets.asyncio.connection import Connection as WebSocket
from websockets.exceptions import ConnectionClosed
from websockets.frames import CloseCode

from core.adapter import AdapterError
from core.adapter.onebot._events import ActionResponse, Frame, MalformedFrame, MetaEvent, parse_frame
from core.utils.nesting import loads_bounded

__all__ = [
    "Connection",
    "OneBotError",
    "ActionFailed",
    "ActionTimeout",
    "NotConnected",
    "ConnectionLost",
    "HEARTBEAT_MISSES",
    "READ_GRACE",
]

logger = logging.getLogger("hookchat.adapter.onebot")

#: A connection whose implementation announced heartbeats is closed after this many intervals without a frame.
HEARTBEAT_MISSES = 3
#: How deeply a frame may nest. A real event or answer needs a few levels per forwarded message inside another;
#: a deeper one is skipped as malformed (parsed without a bound it raised RecursionError and dropped the connection).
MAX_FRAME_DEPTH = 64
#: Seconds an action's answer may wait behind reading paused by a full queue; then reading resumes (and events
#: that find the queue full are refused, their senders told), so a call never waits for room for ever.
READ_GRACE = 2.0


class OneBotError(AdapterError):
    """Base of the OneBot adapter's errors."""


class ActionFailed(OneBotError):
    """The implementation answered `status: failed`: `retcode` and `wording` are its code and words."""

    def __init__(self, action: str, retcode: int, wording: str) -> None:
        super().__init__(f"{action} failed (retcode {retcode}): {wording or 'no reason given'}")
        self.action = action
        self.retcode = retcode
        self.wording = wording


class ActionTimeout(OneBotError):
    """No answer to an action within its deadline (the implementation may still have carried it out)."""


class NotConnected(OneBotError):
    """No connection to send on; nothing was written, so trying again later is safe."""


class ConnectionLost(OneBotError):
    """The connection ended after the action was written and before its answer: it may or may not have run."""


def _compact_encoder() -> Callable[[Any], str]:
    # Compact JSON, non-ASCII as it is. `JSONEncoder.encode` builds its C encoder anew on every call; the one
    # built here serves every action (a third less time per frame). No circular-reference check: params are data.
    encoder = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    make = getattr(json.encoder, "c_make_encoder", None)  # private, so not in the stubs
    if make is None:  # a Python without the C accelerator
        return encoder.encode
    encode_once = make(None, encoder.default, json.encoder.encode_basestring, None, ":", ",", False, False, True)
    return lambda obj: "".join(encode_once(obj, 0))


_encode = _compact_encoder()


def _expire(future: asyncio.Future[ActionResponse], action: str, peer: str, timeout: float) -> None:
    if not future.done():  # the words are put together only when a call does time out
        future.set_exception(ActionTimeout(f"{action}: no answer from {peer} within {timeout:g} s"))


class Connection:
    """A WebSocket to one bot account. `self_id` is None until the implementation names its account (the
    lifecycle event, any event, the `X-Self-ID` header or `get_login_info`). `on_event` gets each event with the
    size of its frame, and may return a future: reading pauses until it resolves."""

    def __init__(
        self,
        ws: WebSocket,
        *,
        peer: str,
        max_pending: int,
        on_event: Callable[[Connection, Frame, dict[str, Any], int], asyncio.Future[None] | None],
        on_identified: Callable[[Connection], None],
        on_malformed: Callable[[], None],
    ) -> None:
        self.ws = ws
        self.peer = peer
        self.self_id: str | None = None
        self.nickname = ""
        self.closed = False
        #: Seconds without any frame after which the connection counts as dead (set by heartbeat events).
        self.silence_limit: float | None = None
        self._max_pending = max_pending
        self._on_event = on_event
        self._on_identified = on_identified
        self._on_malformed = on_malformed
        self._pending: dict[str, asyncio.Future[ActionResponse]] = {}
        self._echoes = itertools.count(1)
        self._last_frame = 0.0  # loop time of the latest frame, kept once heartbeats set `silence_limit`
        self._resume: asyncio.Future[None] | None = None  # set while reading is paused: resolving it resumes
        self._asked: dict[str, float] = {}  # echo -> loop time by which its answer must be read, even when paused

    @property
    def pending(self) -> int:
        """Actions written and waiting for their answer."""
        return len(self._pending)

    def identify(self, self_id: str) -> None:
        """Record which account this connection serves (the first name given wins)."""
        if self.self_id is None and self_id:
            self.self_id = self_id
            self._on_identified(self)

    async def call(self, action: str, params: dict[str, Any], timeout: float, *, urgent: bool = False) -> Any:
        """Run `action` and return its `data`. Raises `NotConnected` (nothing written), `ActionTimeout`,
        `ConnectionLost` or `ActionFailed`. While reading is paused (the adapter's queue is full), its answer is
        read after `READ_GRACE` seconds, or at once when `urgent` (the adapter's event processing waits for it)."""
        if self.closed:
            raise NotConnected(f"the connection to {self.peer} is closed")
        if len(self._pending) >= self._max_pending:
            raise OneBotError(f"{len(self._pending)} actions are already waiting for {self.peer} to answer")
        echo = str(next(self._echoes))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[ActionResponse] = loop.create_future()
        self._pending[echo] = future
        self._asked[echo] = loop.time() + (0 if urgent else READ_GRACE)  # when reading must resume, if paused
        self._wake()
        expiry: asyncio.TimerHandle | None = None
        try:
            try:
                await self.ws.send(_encode({"action": action, "params": params, "echo": echo}))
            except ConnectionClosed:
                self.closed = True  # before the reader notices, so nobody picks this connection again
                raise NotConnected(f"the connection to {self.peer} is closed") from None
            # A timer that fails the future, rather than a timeout scope: no cancellation to unwind per action.
            expiry = loop.call_at(loop.time() + timeout, _expire, future, action, self.peer, timeout)
            response = await future
        finally:
            if expiry is not None:
                expiry.cancel()
            self._pending.pop(echo, None)
            self._asked.pop(echo, None)
            if future.done() and not future.cancelled():
                future.exception()  # cancelled just as the connection failed it: the failure is not news
        if response.status == "failed":
            raise ActionFailed(action, response.retcode, response.wording or response.message)
        return response.data

    async def read(self) -> None:
        """Read frames until the connection ends; then every waiting action fails with `ConnectionLost`."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                limit = self.silence_limit
                if limit is None:
                    pause = self._handle(await self.ws.recv())
                else:
                    # One deadline per stretch of frames, not a timeout scope per frame (two frames per message):
                    # it is checked when it passes, and moved to `limit` after the latest frame while frames still
                    # come. Cancelling `recv()` loses nothing (websockets documents it as safe).
                    pause = None
                    try:
                        async with asyncio.timeout_at(self._last_frame + limit):
                            while self.silence_limit == limit and pause is None:
                                raw = await self.ws.recv()
                                self._last_frame = loop.time()
                                pause = self._handle(raw)
                    except TimeoutError:
                        if loop.time() - self._last_frame < limit:
                            continue
                        logger.warning(
                            "onebot: no frame from %s for %.1f s (heartbeats stopped); reconnecting", self.peer, limit
                        )
                        await self.ws.close(CloseCode.GOING_AWAY, "no heartbeat")
                        return
                if pause is not None:
                    await self._paused(pause)
                    self._last_frame = loop.time()  # frames unread while paused are no sign of silence
        except ConnectionClosed as exc:
            if exc.sent is not None and exc.sent.code == CloseCode.MESSAGE_TOO_BIG:
                logger.warning(
                    "onebot: %s sent a frame larger than max_frame_bytes; refused, connection closed", self.peer
                )
            else:
                logger.info("onebot: connection to %s closed (%s)", self.peer, exc)
        finally:
            self.closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(ConnectionLost(f"the connection to {self.peer} ended before the answer"))

    async def _paused(self, pause: asyncio.Future[None]) -> None:
        """The adapter's queue is full: read nothing (the implementation waits; TCP holds its frames) until `pause`
        resolves, or until an action has waited `READ_GRACE` for its answer (at once for an `urgent` one), which
        only reading brings: a call never deadlocks behind a full queue."""
        loop = asyncio.get_running_loop()
        while not pause.done():
            due = min(self._asked.values(), default=None)
            if due is not None and due <= loop.time():
                return
            self._resume = loop.create_future()
            timer = loop.call_at(due, self._wake) if due is not None else None
            try:
                await asyncio.wait((pause, self._resume), return_when=asyncio.FIRST_COMPLETED)
            finally:
                self._resume = None
                if timer is not None:
                    timer.cancel()

    def _wake(self) -> None:
        if self._resume is not None and not self._resume.done():
            self._resume.set_result(None)

    def _handle(self, raw: str | bytes) -> asyncio.Future[None] | None:
        # An answer (no `post_type` anywhere in it, as most are) is parsed by pydantic straight from the text: no
        # dict to build first. Anything else, or an answer that does not validate, takes the general path below.
        if (b'"post_type"' not in raw) if isinstance(raw, bytes) else ('"post_type"' not in raw):
            try:
                answer = ActionResponse.model_validate_json(raw)
            except ValidationError:
                pass
            else:
                self._answered(answer)
                return None
        data: Any = None
        try:
            data = loads_bounded(raw, MAX_FRAME_DEPTH)
            frame = parse_frame(data)
        except (ValueError, MalformedFrame) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            self._on_malformed()
            logger.warning("onebot: skipped a malformed frame from %s: %s (%.200r)", self.peer, exc, raw)
            # A broken answer still names its call: fail that call now rather than at its deadline.
            echo = data.get("echo") if isinstance(exc, MalformedFrame) and isinstance(data, dict) else None
            future = self._pending.get(str(echo)) if echo is not None else None
            if future is not None and not future.done():
                future.set_exception(OneBotError(f"{self.peer} answered with a malformed frame: {exc}"))
            return None
        if isinstance(frame, ActionResponse):
            self._answered(frame)
            return None
        self.identify(frame.self_id)
        if isinstance(frame, MetaEvent):
            if frame.meta_event_type == "heartbeat" and frame.interval:
                if self.silence_limit is None:
                    self._last_frame = asyncio.get_running_loop().time()
                self.silence_limit = HEARTBEAT_MISSES * frame.interval / 1000
            return None
        return self._on_event(self, frame, data, len(raw))

    def _answered(self, answer: ActionResponse) -> None:
        echo = answer.echo
        future = self._pending.get(echo if type(echo) is str else str(echo)) if echo is not None else None
        if future is not None and not future.done():
            future.set_result(answer)
        elif echo is None:
            logger.warning(
                "onebot: %s sent an answer to no action: status %s, retcode %s: %s",
                self.peer,
                answer.status,
                answer.retcode,
                answer.wording or answer.message,
            )
        else:
            logger.debug("onebot: answer %r from %s came after its deadline", echo, self.peer)
