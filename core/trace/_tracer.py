"""The tracer: which trace is current (a context variable, so every task of a turn sees its turn), starting and
finishing traces, the per-turn trace id in log records, and where finished traces go (the ring, a JSON-lines
file, OpenTelemetry).

The engine asks `tracer.enabled` once per dispatch; with tracing off nothing else runs.
"""

from __future__ import annotations

import contextvars
import itertools
import logging
import os
from collections import OrderedDict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import blinker

from core.chat.message_elements import BaseMessageElement
from core.chat.message_utils import KiraMessageBatchEvent, KiraMessageEvent, MessageStrategy
from core.tag import BaseTag, TagSet
from core.trace._sinks import JsonLinesSink, OtelSink, TraceRing
from core.trace._spans import (
    MAX_ITEMS,
    PROBES,
    TYPED_PROBES,
    HookLike,
    Trace,
    _Extra,
    _now,
    abandon_record,
    clock,
    end_record,
    probed_record,
)

__all__ = ["Tracer", "current_trace", "current_trace_id", "default_file", "install_log_context", "MAX_PENDING_MESSAGES"]

_ID_PREFIX = os.urandom(3).hex()
_ids = itertools.count(1)

_current: contextvars.ContextVar[Trace | None] = contextvars.ContextVar("hookchat_trace", default=None)

#: Messages waiting in a buffer or a queue for their turn keep their trace open; past this many, the oldest are
#: closed (as dropped: their turn's trace will not hold them). A bound on memory should a message never reach a turn
#: nor be dropped (a waiting message's trace is some 3 KB), set well above the messages a busy bot has waiting: one
#: per session talking at once, 10,000 in `bench/pipeline.py` (at 1,000, most turns there lost their messages' traces
#: and paid for writing each as a trace of its own).
MAX_PENDING_MESSAGES = 50_000


def current_trace() -> Trace | None:
    """The trace of the turn (or message, or event) this code runs in; None when tracing is off or outside one."""
    trace = _current.get()
    return trace if trace is not None and trace.ended_ns is None else None


def current_trace_id() -> str:
    """The current trace's id, or "" (what log records carry as `trace_id`)."""
    trace = _current.get()
    return trace.id if trace is not None else ""


_log_factory_installed = False


def install_log_context() -> None:
    """Give every log record a `trace_id` attribute (the current trace's id, or ""), and copy the lines written
    during a trace into it. Installed once per process, by the first enabled tracer; harmless when tracing is off
    (records then carry "")."""
    global _log_factory_installed
    if _log_factory_installed:
        return
    previous = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        trace = _current.get()
        if trace is None:
            record.trace_id = ""
            return record
        record.trace_id = trace.id
        if trace.ended_ns is None:
            try:
                message = record.getMessage()
            except Exception:
                message = str(record.msg)
            trace.log(record.levelname, record.name, message)
        return record

    logging.setLogRecordFactory(factory)
    _log_factory_installed = True


class _TracedTag(BaseTag):
    """A tag as traced requests offer it: runs the real tag and records the occurrence in the trace current when
    it is handled (one wrapper per tag, shared by every traced turn)."""

    def __init__(self, inner: BaseTag) -> None:  # no super().__init__: the name was checked already
        self.inner = inner
        self.ctx = inner.ctx
        self.name = inner.name
        self.description = inner.description
        self.root = inner.root
        self.timeout = inner.timeout  # the real tag's deadline

    @property
    def owner(self) -> str | None:
        """The plugin of the real tag."""
        return self.inner.owner

    async def handle(self, value: str, **kwargs: Any) -> list[Any]:
        trace = current_trace()
        if trace is None:
            return await self.inner.handle(value, **kwargs)
        started = _now()
        try:
            result = await self.inner.handle(value, **kwargs)
        except Exception as exc:
            trace.tag(self.name, self.inner.owner, value, kwargs, started, error=f"{type(exc).__name__}: {exc}")
            raise
        elements = result if isinstance(result, list) else [result] if result is not None else []
        trace.tag(
            self.name,
            self.inner.owner,
            value,
            kwargs,
            started,
            elements=[e for e in elements if isinstance(e, BaseMessageElement)],
        )
        return result


class _Activation:
    """`with tracer.activate(trace):` (a class rather than a generator: it runs once per turn or event)."""

    __slots__ = ("trace", "token")

    def __init__(self, trace: Trace | None) -> None:
        self.trace = trace
        self.token: contextvars.Token[Trace | None] | None = None

    def __enter__(self) -> Trace | None:
        self.token = _current.set(self.trace)
        return self.trace

    def __exit__(self, *exc: object) -> None:
        if self.token is not None:
            _current.reset(self.token)
            self.token = None


class _Untraced:
    """`tracer.message()` and `tracer.turn()` with tracing off: nothing to record (one object for all)."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_UNTRACED = _Untraced()


class _MessageScope:
    """`with tracer.message(event):` (a class rather than a generator: it runs once per message, traced or not)."""

    __slots__ = ("tracer", "event", "trace", "token")

    def __init__(self, tracer: Tracer, event: KiraMessageEvent) -> None:
        self.tracer = tracer
        self.event = event

    def __enter__(self) -> Trace:
        event = self.event
        trace = self.trace = self.tracer.begin("message", event.message_repr[:80], event.sid)
        self.token = _current.set(trace)
        return trace

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc is not None:
            self.tracer.finish(self.trace, "error", f"{type(exc).__name__}: {exc}")
            _current.reset(self.token)
            return
        _current.reset(self.token)
        self.tracer._message_done(self.event, self.trace)


class _TurnScope:
    """`with tracer.turn(batch):` (a class rather than a generator: it runs once per turn)."""

    __slots__ = ("tracer", "batch", "trace", "token")

    def __init__(self, tracer: Tracer, batch: KiraMessageBatchEvent) -> None:
        self.tracer = tracer
        self.batch = batch

    def __enter__(self) -> Trace:
        trace = self.trace = self.tracer._turn_begin(self.batch)
        self.token = _current.set(trace)
        return trace

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        _current.reset(self.token)
        trace = self.trace
        if exc is not None:
            outcome = "cancelled" if not isinstance(exc, Exception) else "error"
            self.tracer.finish(trace, outcome, f"{type(exc).__name__}: {exc}")
        elif trace.ended_ns is None:
            outcome = "stopped" if self.batch.is_stopped else "error" if trace.error else "completed"
            self.tracer.finish(trace, outcome, trace.error)


class Tracer:
    """Records traces when `enabled`; keeps the last `ring_size` finished ones in `store`, and writes each to
    `file` (JSON lines, rotated at `max_file_bytes`) and to OpenTelemetry (`otel=True`) when asked.

    `finished` is a blinker signal sent with the trace (`trace=`) each time one is stored. A tracer that is not
    enabled costs one attribute check per dispatch and records nothing.
    """

    def __init__(
        self,
        *,
        enabled: bool = True,
        ring_size: int = 200,
        file: Path | str | None = None,
        max_file_bytes: int = 10 * 1024 * 1024,
        otel: bool = False,
        otel_provider: Any = None,
    ) -> None:
        self.enabled = enabled
        self.store = TraceRing(ring_size)
        self.file = JsonLinesSink(Path(file), max_file_bytes) if file else None
        self.otel = OtelSink(otel_provider) if otel else None
        self.finished = blinker.Signal("trace finished")
        self._pending: OrderedDict[int, tuple[KiraMessageEvent, Trace]] = OrderedDict()
        self._running: dict[str, Trace] = {}  # turns in progress, readable before they finish
        self._traced_tags: dict[tuple[BaseTag, ...], TagSet] = {}  # the tags of a request -> their traced set
        if enabled:
            install_log_context()

    # -- traces ---------------------------------------------------------------------------------------------------

    def begin(self, kind: str, name: str, sid: str | None = None) -> Trace:
        """A new trace (not yet current: see `activate`)."""
        # This process's random prefix and a count: unique across restarts without a system call per trace (one
        # that releases the GIL hands the loop's core to another thread, several times a turn).
        return Trace(self, f"{kind[0]}{_ID_PREFIX}{next(_ids):06x}", kind, name, sid)

    def activate(self, trace: Trace | None) -> _Activation:
        """Make `trace` current in this context (and the tasks started from it) for the duration of the block."""
        return _Activation(trace)

    def finish(self, trace: Trace, outcome: str, error: str | None = None) -> None:
        """Close `trace` with `outcome` and hand it to the ring, the file and OpenTelemetry."""
        if trace.ended_ns is not None:
            return
        self._running.pop(trace.id, None)
        trace.ended_ns = _now()
        trace.outcome = outcome
        trace.error = error
        self.store.add(trace)
        if self.file is not None:
            self.file.write(trace)
        if self.otel is not None:
            self.otel.export(trace)
        if self.finished.receivers:
            self.finished.send(self, trace=trace)

    def message(self, event: KiraMessageEvent) -> _Untraced | _MessageScope:
        """`with tracer.message(event) as trace:` the trace of one incoming message, current while its `im_message`
        (and `message_buffered`) hooks run; None when tracing is off.

        A message that goes on to a turn keeps its trace open until the turn adopts it (`turn`); a discarded or
        stopped one is finished here.
        """
        return _MessageScope(self, event) if self.enabled else _UNTRACED

    def _message_done(self, event: KiraMessageEvent, trace: Trace) -> None:
        """The message's hooks ran: finish its trace, or keep it open for the turn that will adopt it."""
        if event.is_stopped:
            self.finish(trace, "stopped")
        elif event.strategy is MessageStrategy.DISCARD:
            self.finish(trace, "discarded")
        else:
            trace.outcome = event.strategy.value
            self._pending[id(event)] = (event, trace)
            while len(self._pending) > MAX_PENDING_MESSAGES:
                _, (_, old) = self._pending.popitem(last=False)
                self.finish(old, "dropped", "the message waited too long for a turn")

    def drop(self, events: Iterable[KiraMessageEvent], why: str) -> None:
        """Finish, as "dropped" because of `why`, the open traces of messages no turn will adopt (refused by a full
        backlog, taken back, reset)."""
        for event in events:
            found = self._pending.pop(id(event), None)
            if found is not None and found[0] is event:
                self.finish(found[1], "dropped", why)

    def turn(self, batch: KiraMessageBatchEvent) -> _Untraced | _TurnScope:
        """`with tracer.turn(batch) as trace:` the trace of one turn, current for everything the turn runs (None
        when tracing is off); it adopts its messages' traces."""
        return _TurnScope(self, batch) if self.enabled else _UNTRACED

    def _turn_begin(self, batch: KiraMessageBatchEvent) -> Trace:
        """The trace of `batch`'s turn, with the traces of its messages adopted, readable while it runs."""
        trace = self.begin("turn", batch.message_repr[:80], batch.sid)
        for message in batch.messages:
            found = self._pending.pop(id(message), None)
            if found is not None and found[0] is message:
                found[1].ended_ns = found[1].ended_ns or _now()
                trace.adopt(found[1])
        self._running[trace.id] = trace
        return trace

    # -- the engine's side ----------------------------------------------------------------------------------------

    def dispatch(self, event_name: str, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...]) -> list[Any]:
        """The record of one dispatch of `event` through `chain` (see `new_record`), in the current trace; outside
        any trace the event gets a trace of its own. The engine appends `clock()` to the record after each hook,
        and at the end calls `dispatched(record, event)` when the event was stopped or the record is not a plain
        `list` (a plain record's readings say everything else). Written flat: it runs once per traced dispatch."""
        trace = _current.get()
        if trace is None or trace.ended_ns is not None:
            trace = self.begin("event", event_name)
            record = trace.dispatch(event_name, event, args, chain, closing=True)
            extra = record[1]
            if extra is None:
                extra = record[1] = _Extra(None, None, ())
            extra.owned = (trace, _current.set(trace))
            return record
        typed = TYPED_PROBES.get(event_name)  # `pick_probe`, written out
        if typed is not None:
            probe = typed[1] if isinstance(event, typed[0]) else None
        else:
            pick = PROBES.get(event_name)
            probe = pick(event, args) if pick is not None else None
        record = [chain, None, clock()] if probe is None else probed_record(probe, event, args, chain)
        records = trace.records
        if len(records) < MAX_ITEMS:
            records.append(record)
        else:
            trace.dropped += 1
        return record

    def dispatched(self, record: list[Any], event: Any) -> None:
        """The dispatch of `record` is over: note a stop, let a probed record go of its event, finish a trace the
        dispatch started for itself."""
        owned = end_record(record, event).owned
        if owned is not None:
            trace, token = owned
            _current.reset(token)
            self.finish(trace, "stopped" if event.is_stopped else "completed")

    def abandoned(self, record: list[Any]) -> None:
        """The dispatch of `record` ended by an exception (cancelled from outside): its event is watched as before and
        let go, and a trace the dispatch started for itself is finished as cancelled."""
        owned = abandon_record(record)
        if owned is not None:
            trace, token = owned
            _current.reset(token)
            self.finish(trace, "cancelled", "the dispatch was cancelled")

    def hook_failed(self, entry: HookLike, error: BaseException, timed_out: bool) -> None:
        """The engine reports a hook that raised or passed its deadline."""
        trace = _current.get()
        if trace is not None:
            trace.hook_failed(entry, error, timed_out)

    # -- the agent loop's side ------------------------------------------------------------------------------------

    def traced_tags(self, tag_set: TagSet) -> TagSet:
        """A copy of `tag_set` whose tags record each occurrence in the current trace (the set itself if none)."""
        if current_trace() is None:
            return tag_set
        # A turn offers the same tags as the last one, mostly: their wrappers are made once per set of tags.
        tags = tuple(tag_set)
        traced = self._traced_tags.get(tags)
        if traced is None:
            if len(self._traced_tags) >= 64:  # tags of plugins reloaded, or made per request: start again
                self._traced_tags.clear()
            traced = self._traced_tags[tags] = TagSet([_TracedTag(tag) for tag in tags])
        return traced.copy()

    # -- reading --------------------------------------------------------------------------------------------------

    def get(self, trace_id: str) -> Trace | None:
        """A trace by id: a turn still running, or a finished one kept in the ring (a message's id finds the turn
        that adopted it)."""
        return self._running.get(trace_id) or self.store.get(trace_id)

    def recent(self, limit: int = 20, kind: str | None = None) -> list[Trace]:
        """The newest finished traces, newest first (only `kind` when given)."""
        return self.store.recent(limit, kind)

    def close(self) -> None:
        """Flush and close the file and OpenTelemetry exports."""
        if self.file is not None:
            self.file.close()
        if self.otel is not None:
            self.otel.close()


def default_file(data_dir: Path, name: str) -> Path | None:
    """The JSON-lines file `[trace] file` names, relative to the data directory; None for ""."""
    if not name:
        return None
    path = Path(os.path.expanduser(name))
    return path if path.is_absolute() else data_dir / path
