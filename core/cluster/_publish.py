"""JetStream publishes (stream messages and key-value writes) without nats-py's per-call request machinery: one
reply subscription for all of a connection's publishes, a counter for their reply subjects, one future each, and
one timer for all of them; the stream's acknowledgement is read for its sequence alone. `subscribe_direct` hands a
subscription's messages to a handler as the connection reads them."""

from __future__ import annotations

import asyncio
import itertools
import json
import re
from collections.abc import Callable
from typing import Any

import nats.errors
import nats.js.errors
from nats.aio.msg import Msg

from core.utils.log import logger

__all__ = ["Publisher", "subscribe_direct"]

_SEQ = re.compile(rb'"seq":(\d+)')
_NO_RESPONDERS = "503"
_WRONG_LAST_SEQUENCE = (10071, 10164)  # the codes nats-py's key-value turns into KeyWrongLastSequenceError


class _Direct:
    """Stands for the future of nats-py's one-reply subscriptions (`subscribe(future=...)`), which its reader resolves
    as it reads the message (`cancelled()`, then `set_result(msg)`): here each message goes to a handler instead."""

    def __init__(self, handler: Callable[[Msg], None]) -> None:
        self._handler = handler

    def cancelled(self) -> bool:
        """Never: the subscription lasts until it is unsubscribed."""
        return False

    def set_result(self, msg: Msg) -> None:
        """Hand `msg` to the handler; what it raises is logged, not raised into the connection's reader."""
        try:
            self._handler(msg)
        except Exception:
            logger.exception("cluster: handling a message on %s failed", msg.subject)


async def subscribe_direct(nc: Any, subject: str, handler: Callable[[Msg], None]) -> Any:
    """Subscribe to `subject` with `handler` (plain, quick, never awaiting) called as the connection reads each
    message. A callback subscription (`cb=`) puts each message on a queue read by a task of its own, so whatever
    waits on a message is woken one turn of the event loop later: during a burst, a turn of a loop busy with dozens
    of turns, paid on each delivery and each publish's acknowledgement. Unsubscribed, drained and resubscribed after
    a reconnection like any other subscription."""
    return await nc.subscribe(subject, future=_Direct(handler))  # nc is nats-py's Client: see _Direct


class Publisher:
    """Publishes on connection `nc` and waits for the stream's acknowledgement, many publishes in flight at once (the
    connection's writer sends together whatever was published meanwhile, and each waits only on its own future).

    Per publish, nats-py's `js.publish` draws a random token (a system call), validates the subjects, makes a timer
    and two futures (`wait_for`), and parses the answer into a dataclass; this makes one future and reads the
    sequence with a regular expression, and one timer fails whatever waited past its deadline. Errors are those of
    nats-py: `nats.errors.TimeoutError`, `NoStreamResponseError`, `KeyWrongLastSequenceError` for a conditional
    write that lost, `APIError` for the rest."""

    def __init__(self, nc: Any, timeout: float) -> None:
        self._nc = nc
        self.timeout = timeout
        self._prefix = nc.new_inbox() + "."
        self._tokens = itertools.count()
        self._waiting: dict[str, tuple[asyncio.Future[Msg], float]] = {}  # token -> its future, its deadline
        self._timer: asyncio.TimerHandle | None = None  # due at the earliest deadline of those waiting (or sooner)
        self._sub: Any = None

    async def start(self) -> None:
        """Subscribe to the acknowledgements (the subscription ends with the connection)."""
        self._sub = await subscribe_direct(self._nc, self._prefix + "*", self._acknowledged)

    def _acknowledged(self, msg: Msg) -> None:
        waiting = self._waiting.pop(msg.subject[len(self._prefix) :], None)
        if waiting is not None and not waiting[0].done():
            waiting[0].set_result(msg)

    async def publish(
        self, subject: str, payload: bytes, headers: dict[str, str] | None = None, timeout: float | None = None
    ) -> int:
        """Publish `payload` to `subject` and return its stream sequence once the stream holds it (at most `timeout`
        seconds, default `self.timeout`)."""
        loop = asyncio.get_running_loop()
        token = str(next(self._tokens))
        future: asyncio.Future[Msg] = loop.create_future()
        deadline = loop.time() + (self.timeout if timeout is None else timeout)
        self._waiting[token] = (future, deadline)
        if self._timer is None or self._timer.when() > deadline:
            self._arm(loop, deadline)
        try:
            await self._nc.publish(subject, payload, reply=self._prefix + token, headers=headers)
            msg = await future
        finally:
            self._waiting.pop(token, None)
        data = msg.data
        if not data and msg.headers and msg.headers.get("Status") == _NO_RESPONDERS:
            raise nats.js.errors.NoStreamResponseError
        found = _SEQ.search(data)
        if found is None or b'"error"' in data:
            error = json.loads(data).get("error") or {"code": 500, "description": f"unexpected answer {data[:200]!r}"}
            if error.get("err_code") in _WRONG_LAST_SEQUENCE:
                raise nats.js.errors.KeyWrongLastSequenceError(description=error.get("description"))
            nats.js.errors.APIError.from_error(error)  # raises the class of its code
            raise nats.js.errors.APIError(**error)
        return int(found[1])

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer = loop.call_at(when, self._expire, loop)

    def _expire(self, loop: asyncio.AbstractEventLoop) -> None:
        """Fail the publishes whose deadline passed, then wait for the earliest deadline left. Only the publishes
        still waiting are looked at (dozens), not a record of every publish of the last `timeout` seconds (at 2,000
        turns a second, 20,000, which a heap kept and dropped in one go, stopping the loop for 10 ms)."""
        self._timer = None
        now = loop.time()
        for token, (future, deadline) in list(self._waiting.items()):
            if deadline <= now:
                del self._waiting[token]
                if not future.done():
                    future.set_exception(nats.errors.TimeoutError())
        if self._waiting:
            self._arm(loop, min(deadline for _, deadline in self._waiting.values()))
