"""Proactive messages from plugins (`self.push_message(...)`): validated against the v2 schema, queued on one bounded
outbound queue per app, and delivered in priority order by a task the push service owns. The caller gets an
honest receipt at once: whether the local submission path accepted responsibility, and if not, why.
"""

from __future__ import annotations

import asyncio
import base64
import heapq
import itertools
import threading
import time
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

from core.chat import (
    KiraIMMessage,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    Session,
    TurnResult,
    User,
)
from core.chat.message_elements import Image, Text
from core.chat.session import SessionIdError
from core.services._host import PluginHost, PushReceipt
from core.services._result import SdkError
from core.utils.log import get_logger
from core.utils.signals import message_sent
from core.utils.tasks import cancel_and_wait

__all__ = [
    "PushService",
    "PushReceipt",
    "PushMessageError",
    "PUSH_REASONS",
    "VISIBILITIES",
    "AI_BEHAVIORS",
]

logger = get_logger("services.push")

#: The stable reasons of a rejected receipt.
PUSH_REASONS = ("backpressure", "transport_error", "transport_unavailable")
VISIBILITIES = frozenset({"chat", "hud"})
AI_BEHAVIORS = frozenset({"respond", "read", "blind"})
_V2_FIELDS = frozenset({"source", "visibility", "ai_behavior", "parts", "priority", "session"})
_V1_FIELDS = frozenset({"message_type", "content", "description", "delivery", "reply", "metadata", "unsafe"})
_MAX_INLINE_IMAGE = 2 * 1024 * 1024  # bytes of base64, as for tool pictures
_MAX_TEXT = 64 * 1024


class PushMessageError(SdkError):
    """A `push_message` call is malformed (a bug in the caller, not a transport condition); nothing was queued."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="invalid_push_message")


@dataclass(order=False)
class _Push:
    id: str
    plugin_id: str
    source: str
    session: Session
    visibility: frozenset[str]
    ai_behavior: str
    chain: MessageChain
    priority: int
    created: float = field(default_factory=time.time)


def _rejected(reason: str) -> PushReceipt:
    return {"submitted": False, "ok": False, "reason": reason}


def _parts_to_chain(parts: Any) -> MessageChain:
    if not isinstance(parts, list) or not parts:
        raise PushMessageError("parts must be a non-empty list of {'type': 'text'|'image', ...} dicts")
    chain = MessageChain()
    for index, part in enumerate(parts):
        if not isinstance(part, dict):
            raise PushMessageError(f"parts[{index}] must be a dict, not {type(part).__name__}")
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if not isinstance(text, str):
                raise PushMessageError(f"parts[{index}]: a text part needs 'text' (a string)")
            if len(text) > _MAX_TEXT:
                raise PushMessageError(f"parts[{index}]: text longer than {_MAX_TEXT} characters")
            chain.append(Text(text))
        elif kind == "image":
            if "url" in part:
                raise PushMessageError(
                    f"parts[{index}]: external image URLs are not accepted; send the bytes as 'data'"
                )
            data = part.get("data", part.get("base64"))
            if isinstance(data, bytes | bytearray | memoryview):
                encoded = base64.b64encode(bytes(data)).decode("ascii")
            elif isinstance(data, str) and data:
                encoded = data
            else:
                raise PushMessageError(f"parts[{index}]: an image part needs 'data' (bytes or base64 text)")
            if len(encoded) > _MAX_INLINE_IMAGE:
                raise PushMessageError(f"parts[{index}]: inline image over {_MAX_INLINE_IMAGE // 1024} KiB of base64")
            mime = part.get("mime") or "image/png"
            if not isinstance(mime, str) or not mime.startswith("image/"):
                raise PushMessageError(f"parts[{index}]: mime must be an image/* type, not {mime!r}")
            chain.append(Image(base64=encoded, mime=mime, name=part.get("name")))
        elif kind in ("audio", "video", "record"):
            raise PushMessageError(
                f"parts[{index}]: {kind} parts are not delivered by hookchat; do not report them as played or shown"
            )
        else:
            raise PushMessageError(f"parts[{index}]: unknown part type {kind!r} (use 'text' or 'image')")
    return chain


def _translate_v1(fields: dict[str, Any]) -> dict[str, Any]:
    legacy = sorted(k for k in fields if k in _V1_FIELDS)
    if not legacy:
        return fields
    warnings.warn(
        f"push_message v1 fields {', '.join(legacy)} are deprecated; use source, visibility, "
        "ai_behavior, parts and priority",
        DeprecationWarning,
        stacklevel=4,
    )
    out = {k: v for k, v in fields.items() if k not in _V1_FIELDS}
    content = fields.get("content")
    if "parts" not in out and isinstance(content, str):
        out["parts"] = [{"type": "text", "text": content}]
    if "ai_behavior" not in out and "reply" in fields:
        out["ai_behavior"] = "respond" if fields["reply"] else "read"
    out.setdefault("visibility", ["chat"])
    return out


class PushService:
    """The bounded outbound queue of proactive messages of one app, and the task that delivers them.

    `submit()` never blocks and never waits for delivery: it validates, picks the target session, and queues.
    Receipt: `{"submitted": True, "ok": True, "id": ..., "session": ...}` means only that this local path accepted
    responsibility; it does not mean the adapter sent it, the model read it, or anyone saw it. A rejection is
    `{"submitted": False, "ok": False, "reason": r}` with `r` one of:

    - `backpressure`: the queue holds `capacity` messages not yet delivered;
    - `transport_unavailable`: the service is not running (app not started or stopping), the plugin is stopping,
      there is no target session, no adapter serves the target session, or nothing could carry the message:
      no `"chat"` visibility and the model left out (`"blind"`), or only `"read"` in an app without history;
    - `transport_error`: the last delivery through the target's adapter failed less than `failure_hold` seconds
      ago and nothing was sent through it successfully since.

    The target is `session=`; without it, the only session the bot has sent to. Once it has sent to a second
    session there is no default (a plugin's notification must not reach another user): name the session.

    Malformed calls raise `PushMessageError`. Delivery, in priority order (higher first, then FIFO): parts with
    `"chat"` visibility are sent to the session through its adapter; `ai_behavior="read"` adds the message to the
    session's history (the model reads it next turn); `"respond"` also runs a turn for it now; `"blind"` leaves
    the model out. `"hud"` has no display in hookchat: alone, it carries nothing.
    """

    def __init__(self, app: PluginHost | None, *, capacity: int = 64, failure_hold: float = 30.0) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self.app = app
        self.capacity = capacity
        self.failure_hold = failure_hold
        self.default_session: Session | None = None  # the only session sent to so far; None once there are two
        self._sessions_seen = 0  # 0, 1, or 2 meaning "two or more"
        self._told: set[str] = set()  # plugins already warned that they must name a session
        self._lock = threading.Lock()
        self._heap: list[tuple[int, int, _Push]] = []
        self._seq = itertools.count()
        self._pending = 0  # queued + being delivered
        self._failing: dict[str, float] = {}  # adapter name -> monotonic time of its last failed delivery
        self._outcomes: dict[str, str] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: int | None = None
        self._wakeup: asyncio.Event | None = None
        self._idle: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._turns: set[asyncio.Future[TurnResult]] = set()  # turns that "respond" pushes caused, still running
        self._running = False

    # -- lifecycle -------------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        """True between `start()` and `aclose()`."""
        return self._running

    async def start(self) -> None:
        """Start the delivery task (on the running loop) and follow the app's sent messages."""
        if self._running:
            return
        self._loop = asyncio.get_running_loop()
        self._loop_thread = threading.get_ident()
        self._wakeup = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        message_sent.connect(self._on_sent, sender=self.app, weak=False)
        self._task = self._loop.create_task(self._drain(), name="hookchat:push")
        self._running = True

    async def aclose(self) -> None:
        """Stop accepting messages and cancel the delivery task; messages still queued are dropped (logged)."""
        if not self._running:
            return
        self._running = False
        # From every sender: blinker's disconnect for one sender keeps a strong receiver (and so this service and
        # its app) in the signal for the life of the process.
        message_sent.disconnect(self._on_sent)
        task, self._task = self._task, None
        await cancel_and_wait(task)
        for turn in list(self._turns):  # the scheduler cancels them too when the app stops; say so here
            turn.cancel()
        with self._lock:
            dropped = len(self._heap)
            for _, _, item in self._heap:
                self._outcomes[item.id] = "dropped"
            self._heap.clear()
            self._pending = 0
        if self._idle is not None:
            self._idle.set()
        if dropped:
            logger.warning("push service stopped with %d undelivered message(s)", dropped)

    # -- submission ------------------------------------------------------------------------------------------------

    def submit(self, plugin_id: str, **kwargs: Any) -> PushReceipt:
        """Queue a proactive message of `plugin_id`; returns the receipt (see the class). Any thread may call it."""
        fields = _translate_v1(dict(kwargs))
        unknown = sorted(set(fields) - _V2_FIELDS)
        if unknown:
            raise PushMessageError(f"unknown push_message field(s): {', '.join(unknown)}")
        source = fields.get("source")
        if not isinstance(source, str) or not source.strip():
            raise PushMessageError("push_message needs source= (a short name of the feature sending it)")
        visibility = fields.get("visibility", ["chat"])
        if not isinstance(visibility, list | tuple | set | frozenset) or not set(visibility) <= VISIBILITIES:
            raise PushMessageError(f"visibility must be a list drawn from {sorted(VISIBILITIES)}, not {visibility!r}")
        ai_behavior = fields.get("ai_behavior", "read")
        if ai_behavior not in AI_BEHAVIORS:
            raise PushMessageError(f"ai_behavior must be one of {sorted(AI_BEHAVIORS)}, not {ai_behavior!r}")
        priority = fields.get("priority", 0)
        if not isinstance(priority, int) or isinstance(priority, bool) or not 0 <= priority <= 10:
            raise PushMessageError(f"priority must be an integer from 0 to 10, not {priority!r}")
        chain = _parts_to_chain(fields.get("parts"))
        target = fields.get("session")
        if target is not None and not isinstance(target, Session | str):
            raise PushMessageError(f"session must be a session id 'adapter:dm|gm:id' or a Session, not {target!r}")
        if isinstance(target, str):
            try:
                target = Session.from_sid(target)
            except SessionIdError as exc:
                raise PushMessageError(str(exc)) from None

        if not self._running or self._loop is None or self._loop.is_closed():
            return _rejected("transport_unavailable")
        if not self._can_carry(frozenset(visibility), ai_behavior):
            return _rejected("transport_unavailable")
        session = target or self.default_session
        if session is None or self.app is None or not self.app.serves(session):
            if session is None and self._sessions_seen > 1 and plugin_id not in self._told:
                self._told.add(plugin_id)
                logger.warning(
                    "push_message of plugin %r refused: the bot talks to several sessions, so name one with session=",
                    plugin_id,
                )
            return _rejected("transport_unavailable")
        failed_at = self._failing.get(session.adapter_name)
        if failed_at is not None and time.monotonic() - failed_at < self.failure_hold:
            return _rejected("transport_error")
        item = _Push(
            f"push-{uuid.uuid4().hex[:12]}",
            plugin_id,
            source.strip(),
            session,
            frozenset(visibility),
            ai_behavior,
            chain,
            priority,
        )
        with self._lock:
            if len(self._heap) >= self.capacity:
                return _rejected("backpressure")
            heapq.heappush(self._heap, (-priority, next(self._seq), item))
            self._pending += 1
            self._outcomes[item.id] = "pending"
            self._trim_outcomes()
        try:
            if threading.get_ident() == self._loop_thread:
                self._submitted()
            else:
                self._loop.call_soon_threadsafe(self._submitted)
        except RuntimeError:  # the loop closed between the check and now
            with self._lock:
                self._heap = [e for e in self._heap if e[2] is not item]
                heapq.heapify(self._heap)
                self._pending -= 1
                self._outcomes[item.id] = "dropped"
            return _rejected("transport_unavailable")
        return {"submitted": True, "ok": True, "id": item.id, "session": session.sid}

    def outcome(self, push_id: str) -> str | None:
        """What became of a submitted message: `pending`, `delivered`, `transport_error` or `dropped` (None: unknown;
        the newest 1,000 are remembered)."""
        with self._lock:
            return self._outcomes.get(push_id)

    @property
    def queued(self) -> int:
        """Messages waiting in the queue (not counting the one being delivered)."""
        with self._lock:
            return len(self._heap)

    async def join(self) -> None:
        """Wait until every message submitted so far was delivered (or failed)."""
        assert self._idle is not None, "the push service was never started"
        while True:
            with self._lock:
                if self._pending == 0:
                    return
            self._idle.clear()
            await self._idle.wait()

    # -- delivery --------------------------------------------------------------------------------------------------

    def _trim_outcomes(self) -> None:
        while len(self._outcomes) > 1000:
            self._outcomes.pop(next(iter(self._outcomes)))

    def _submitted(self) -> None:
        if self._idle is not None and self._pending:
            self._idle.clear()
        if self._wakeup is not None:
            self._wakeup.set()

    def _can_carry(self, visibility: frozenset[str], ai_behavior: str) -> bool:
        """Whether delivering such a message would do anything at all here."""
        if "chat" in visibility:
            return True
        if ai_behavior == "read":
            return self.app is not None and self.app.has_history
        return ai_behavior == "respond" and self.app is not None

    def _on_sent(
        self, _sender: object, session: Session | None = None, result: KiraIMSentResult | None = None, **_: object
    ) -> None:
        if session is None or result is None or not result.ok:
            return
        if self._sessions_seen == 0:
            self._sessions_seen, self.default_session = 1, session
        elif self._sessions_seen == 1 and session != self.default_session:
            self._sessions_seen, self.default_session = 2, None
        self._failing.pop(session.adapter_name, None)

    def _pop(self) -> _Push | None:
        with self._lock:
            return heapq.heappop(self._heap)[2] if self._heap else None

    async def _drain(self) -> None:
        assert self._wakeup is not None and self._idle is not None
        while True:
            await self._wakeup.wait()
            self._wakeup.clear()
            while (item := self._pop()) is not None:
                try:
                    outcome = await self._deliver(item)
                except Exception:  # a bug here must not stop later deliveries; the body is never logged
                    logger.exception("push %s of plugin %r failed", item.id, item.plugin_id)
                    outcome = "transport_error"
                with self._lock:
                    self._outcomes[item.id] = outcome
                    self._pending -= 1
                    idle = self._pending == 0
                if idle:
                    self._idle.set()

    async def _deliver(self, item: _Push) -> str:
        app = self.app
        assert app is not None, "a push is only queued while the app runs"
        adapter = item.session.adapter_name
        if "chat" in item.visibility:
            push = {"id": item.id, "plugin_id": item.plugin_id, "source": item.source, "priority": item.priority}
            sent = await app.send(
                item.session, MessageChain(item.chain), KiraMessageBatchEvent([], item.session, push=push)
            )
            if not sent.ok:
                self._failing[adapter] = time.monotonic()
                logger.warning(
                    "push %s of plugin %r to %s not delivered: the adapter refused it",
                    item.id,
                    item.plugin_id,
                    item.session.sid,
                )
                return "transport_error"
            self._failing.pop(adapter, None)
        if item.ai_behavior in ("read", "respond"):
            await self._remember(item)
        if item.ai_behavior == "respond":
            self._respond(item)
        return "delivered"

    def _model_text(self, item: _Push) -> str:
        shown = " (shown to the user in chat)" if "chat" in item.visibility else ""
        return f"[notification from plugin {item.plugin_id} ({item.source}){shown}] {item.chain.message_repr}"

    async def _remember(self, item: _Push) -> None:
        if item.ai_behavior != "read" or self.app is None:
            return  # a "respond" message enters history with the turn it causes
        meta = {"push": {"id": item.id, "plugin_id": item.plugin_id, "source": item.source, "priority": item.priority}}
        await self.app.remember(item.session, self._model_text(item), meta)

    def _respond(self, item: _Push) -> None:
        """Submit the turn this push asks for through the pipeline, like any batch; its outcome is logged."""
        if self.app is None:
            return
        chain = MessageChain([Text(self._model_text(item))])
        message = KiraIMMessage(chain, User(f"plugin:{item.plugin_id}", item.source), item.session)
        push = {"id": item.id, "plugin_id": item.plugin_id, "source": item.source, "priority": item.priority}
        turn = self.app.submit(KiraMessageBatchEvent([KiraMessageEvent(message)], item.session, push=push))
        self._turns.add(turn)
        turn.add_done_callback(lambda done: self._turn_done(item, done))

    def _turn_done(self, item: _Push, turn: asyncio.Future[TurnResult]) -> None:
        self._turns.discard(turn)
        if turn.cancelled():
            logger.warning("the turn push %s of plugin %r asked for was cancelled", item.id, item.plugin_id)
        elif turn.exception() is not None:
            logger.error(
                "the turn push %s of plugin %r asked for failed", item.id, item.plugin_id, exc_info=turn.exception()
            )
