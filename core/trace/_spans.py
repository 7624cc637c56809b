"""The live record of one trace: the dispatches of events through their hooks, with what each hook changed, and
the model calls, tool calls, tags, sends, history writes and log lines of the same turn.

Recording is kept cheap (one clock reading and one append per hook); everything a reader sees (durations, file and
line, the changes a hook made) is worked out when the trace is read, from what was captured while it ran.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Protocol

from core.chat.message_utils import KiraMessageEvent, MessageChain
from core.prompt_manager import Prompt
from core.tag import TagSet
from core.utils.tool_utils import ToolSet

__all__ = [
    "Trace",
    "DispatchSpan",
    "HookCall",
    "HookLike",
    "RequestLike",
    "ResponseLike",
    "UsageLike",
    "MAX_ITEMS",
    "MAX_LOGS",
    "TEXT_LIMIT",
]

#: At most this many dispatches, model calls, tool calls, tags and sends are kept per trace; later ones are counted.
MAX_ITEMS = 2_000
#: At most this many log lines are kept per trace.
MAX_LOGS = 500
#: Texts (prompts, outputs, arguments) are cut to this many characters in a trace.
TEXT_LIMIT = 4_000

_now = time.perf_counter_ns


class HookLike(Protocol):
    """What a trace reads of a hook in a resolved chain (the engine's `HookEntry`)."""

    fn: Callable[..., Any]
    plugin_id: str
    hook_name: str
    event: str
    priority: int
    deadline: float


class RequestLike(Protocol):
    """What a trace reads of a model request (`LLMRequest`)."""

    system_prompt: list[Prompt]
    tool_set: ToolSet
    tool_choice: str
    messages: list[Any]
    model: str | None


class UsageLike(Protocol):
    """What a trace reads of a response's token counts (`TokenUsage`)."""

    prompt_tokens: int
    completion_tokens: int


class ResponseLike(Protocol):
    """What a trace reads of a model response (`LLMResponse`)."""

    text_response: str
    tool_calls: list[Any]
    usage: UsageLike
    model: str
    finish_reason: str


def _cut(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _where(fn: Callable[..., Any]) -> tuple[str, int]:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("?", 0)


# -- what a hook could change, per event: a snapshot taken before each hook and after the last ------------------


def _strategy(event: Any, args: tuple[Any, ...]) -> Any:
    return (event.strategy.value, event.strategy_forced)


def _request(event: Any, args: tuple[Any, ...]) -> Any:
    req, tag_set = args[0], args[1]
    prompts = tuple((p.name, p.source, p.content) for p in req.system_prompt)
    tools = tuple(req.tool_set.names()) if isinstance(req.tool_set, ToolSet) else ()
    tags = tuple(tag_set.names()) if isinstance(tag_set, TagSet) else ()
    return prompts, tools, tags, req.user_prompt


def _chain(event: Any, args: tuple[Any, ...]) -> Any:
    return tuple(e.repr_text() for e in args[0])


#: Events whose hooks can change something the trace shows (a strategy, the request, an outgoing chain).
PROBED_EVENTS = frozenset({"im_message", "message_buffered", "llm_request", "after_xml_parse"})


def _probe_for(event_name: str, event: Any, args: tuple[Any, ...]) -> Callable[[Any, tuple[Any, ...]], Any] | None:
    if event_name in ("im_message", "message_buffered") and isinstance(event, KiraMessageEvent):
        return _strategy
    if event_name == "llm_request" and len(args) == 2:
        return _request
    if event_name == "after_xml_parse" and args and isinstance(args[0], MessageChain):
        return _chain
    return None


def _changes(probe: Any, before: Any, after: Any) -> tuple[list[str], dict[str, Any] | None]:
    """What changed between two snapshots, as lines a reader understands, and the strategy set (if any)."""
    if before is None or after is None or before == after:
        return [], None
    if probe is _strategy:
        strategy = {"strategy": after[0], "force": after[1]}
        return [f"strategy {before[0]} -> {after[0]}" + (" (force)" if after[1] else "")], strategy
    if probe is _chain:
        return [f"chain {''.join(before)!r} -> {''.join(after)!r}"], None
    lines: list[str] = []
    (p0, t0, g0, u0), (p1, t1, g1, u1) = before, after
    old = {(name, i): (source, content) for i, (name, source, content) in enumerate(p0)}
    for i, (name, source, content) in enumerate(p1):
        known = old.get((name, i))
        if known is None:
            lines.append(f"prompt section {name!r} added (source {source!r}): {_cut(content, 200)!r}")
        elif known[1] != content:
            lines.append(f"prompt section {name!r} edited: {_cut(content, 200)!r}")
    if len(p1) < len(p0):
        lines.append(f"{len(p0) - len(p1)} prompt section(s) removed")
    lines += [f"tool {name!r} added" for name in t1 if name not in t0]
    lines += [f"tool {name!r} removed" for name in t0 if name not in t1]
    lines += [f"tag <{name}> added" for name in g1 if name not in g0]
    lines += [f"tag <{name}> removed" for name in g0 if name not in g1]
    if u0 != u1:
        lines.append(f"user prompt edited: {_cut(u1, 200)!r}")
    return lines, None


@dataclass(slots=True)
class HookCall:
    """One hook as it ran: where it lives, when it started, how long it took and how it ended.

    `outcome` is `returned`, `stopped` (it stopped the event), `raised` (`error` and `traceback` say what),
    `timed_out` (cancelled at its deadline) or `cancelled` (the dispatch was cancelled from outside while it ran).
    `strategy` is the strategy it set (`{"strategy", "force"}`), `changes` what else it changed that the framework
    can see (prompt sections, tools and tags of the request, the chain of an outgoing message).
    """

    event: str
    plugin_id: str
    function: str
    file: str
    line: int
    priority: int
    deadline: float
    start_ms: float
    duration_ms: float
    outcome: str = "returned"
    error: str | None = None
    traceback: str | None = None
    strategy: dict[str, Any] | None = None
    changes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The call as JSON data."""
        return {
            "event": self.event,
            "plugin_id": self.plugin_id,
            "function": self.function,
            "file": self.file,
            "line": self.line,
            "priority": self.priority,
            "deadline": self.deadline,
            "start_ms": round(self.start_ms, 3),
            "duration_ms": round(self.duration_ms, 3),
            "outcome": self.outcome,
            "error": self.error,
            "traceback": self.traceback,
            "strategy": self.strategy,
            "changes": self.changes,
        }


class _Extra:
    """The rarely needed part of a dispatch record: snapshots, failures, a stop, an own trace."""

    __slots__ = ("probe", "obj", "args", "states", "end_state", "failures", "stopped", "token")

    def __init__(self, probe: Callable[[Any, tuple[Any, ...]], Any] | None, obj: Any, args: tuple[Any, ...]) -> None:
        self.probe = probe
        self.obj = obj
        self.args = args
        self.states: list[Any] = []
        self.end_state: Any = None
        self.failures: dict[int, tuple[str, str, str | None]] = {}
        self.stopped = False
        self.token: Any = None  # the context token of a trace this dispatch started for itself


class _ProbedRecord(list):
    """A dispatch record whose event a hook can visibly change: each mark also snapshots the event."""

    __slots__ = ()

    def append(self, at: int) -> None:  # the engine's `mark`
        extra = self[0][2]
        extra.states.append(extra.probe(extra.obj, extra.args))
        list.append(self, at)


def new_record(event_name: str, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...]) -> list[Any]:
    """The raw record of one dispatch, kept as cheap as the tracing-on benchmark needs: a list whose first item
    is the header `[event name, chain, _Extra or None, ended]` and whose other items are clock readings
    (`time.perf_counter_ns()`): one before each hook (the hooks run in chain order, so reading i belongs to
    `chain[i]`) and one when the dispatch ended. The engine appends the readings (`record.append(clock())`)."""
    probe = _probe_for(event_name, event, args)
    if probe is None:
        return [[event_name, chain, None, False]]
    return _ProbedRecord([[event_name, chain, _Extra(probe, event, args), False]])


def end_record(record: list[Any], event: Any) -> _Extra | None:
    """Close a dispatch record: the last clock reading, what the event looked like at the end, whether a hook
    stopped it. Returns the record's `_Extra` (None when nothing rare happened)."""
    list.append(record, _now())
    header = record[0]
    header[3] = True
    extra = header[2]
    if extra is not None:
        if extra.probe is not None:
            extra.end_state = extra.probe(extra.obj, extra.args)
        extra.obj = extra.args = None  # keep no event alive in the ring
    if event.is_stopped:
        if extra is None:
            extra = header[2] = _Extra(None, None, ())
        extra.stopped = True
    return extra


def record_failure(record: list[Any], entry: HookLike, error: BaseException, timed_out: bool) -> bool:
    """Note that `entry` raised or passed its deadline; False when `entry` did not run in this dispatch."""
    header = record[0]
    chain = header[1]
    for index in range(len(record) - (2 if header[3] else 1) - 1, -1, -1):
        if index < len(chain) and chain[index] is entry:
            if header[2] is None:
                header[2] = _Extra(None, None, ())
            tb = None if timed_out else "".join(traceback.format_exception(error))
            header[2].failures[index] = ("timed_out" if timed_out else "raised", f"{type(error).__name__}: {error}",
                                         tb)
            return True
    return False


class DispatchSpan:
    """One dispatch of an event through its hook chain, read from its raw record: `hooks()` and `to_dict()`."""

    def __init__(self, trace: Trace, record: list[Any]) -> None:
        self.trace = trace
        self.event, self.chain, self.extra, self.ended = record[0]
        readings: list[int] = record[1:]
        # Before each hook one reading, and one at the end (missing while running, or when cancelled).
        self.times = readings[:-1] if self.ended else readings
        self.end_at: int | None = readings[-1] if self.ended else None

    def hooks(self) -> list[HookCall]:
        """The hooks that ran, in order."""
        base = self.trace.started_ns
        end = self.end_at if self.end_at is not None else self.trace.ended_ns or _now()
        extra = self.extra
        probe = extra.probe if extra is not None else None
        states = extra.states if extra is not None and probe is not None else None
        failures = extra.failures if extra is not None else {}
        stopped = extra.stopped if extra is not None else False
        calls: list[HookCall] = []
        times = self.times
        last = len(times) - 1
        for i, at in enumerate(times):
            entry = self.chain[i]
            until = times[i + 1] if i < last else end
            if states is not None:
                after = states[i + 1] if i < last else extra.end_state  # type: ignore[union-attr]
                changes, strategy = _changes(probe, states[i], after)
            else:
                changes, strategy = [], None
            file, line = _where(entry.fn)
            call = HookCall(entry.event, entry.plugin_id, entry.hook_name, file, line, entry.priority, entry.deadline,
                            (at - base) / 1e6, (until - at) / 1e6, strategy=strategy, changes=changes)
            failure = failures.get(i)
            if failure is not None:
                call.outcome, call.error, call.traceback = failure
            elif i == last and self.end_at is None:
                call.outcome = "cancelled"
            elif i == last and stopped:
                call.outcome = "stopped"
            calls.append(call)
        return calls

    def to_dict(self) -> dict[str, Any]:
        """The dispatch as a timeline item."""
        base = self.trace.started_ns
        start = self.times[0] if self.times else base
        end = self.end_at if self.end_at is not None else self.trace.ended_ns or _now()
        hooks = self.hooks()
        stopped_by = next((f"{h.plugin_id}.{h.function}" for h in hooks if h.outcome == "stopped"), None)
        return {
            "type": "event",
            "event": self.event,
            "start_ms": round((start - base) / 1e6, 3),
            "duration_ms": round((end - start) / 1e6, 3),
            "hooks": [h.to_dict() for h in hooks],
            "stopped_by": stopped_by,
        }


class Trace:
    """Everything one turn (or one message, or one event outside a turn) went through, in order.

    `kind` is `turn`, `message` or `event`; `id` is put into every log line written while the trace is current.
    Messages merged into a turn are kept as its `messages` (their own traces, with their `im_message` hooks).
    """

    def __init__(self, tracer: Any, trace_id: str, kind: str, name: str, sid: str | None = None) -> None:
        self.tracer = tracer
        self.id = trace_id
        self.kind = kind
        self.name = name
        self.sid = sid
        self.started_at = datetime.now(timezone.utc)
        self.started_ns = _now()
        self.ended_ns: int | None = None
        self.outcome = "running"
        self.error: str | None = None
        self.messages: list[Trace] = []
        self.records: list[list[Any]] = []  # raw dispatch records (see `new_record`)
        self.items: list[dict[str, Any]] = []  # model calls, tool calls, tags, sends, history, with start_ms
        self.logs: list[dict[str, Any]] = []
        self.dropped = 0
        self._dict: dict[str, Any] | None = None

    # -- recording ------------------------------------------------------------------------------------------------

    @property
    def finished(self) -> bool:
        """True once the trace is complete and stored."""
        return self.ended_ns is not None

    def ms(self, at_ns: int | None = None) -> float:
        """Milliseconds since the trace started (now, or at `at_ns`, a `time.perf_counter_ns()` reading)."""
        return round(((at_ns if at_ns is not None else _now()) - self.started_ns) / 1e6, 3)

    def dispatch(self, event_name: str, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...]) -> list[Any]:
        """Open the record of one dispatch through `chain` (the engine calls this when tracing is on)."""
        record = new_record(event_name, event, args, chain)
        if len(self.records) < MAX_ITEMS:
            self.records.append(record)
        else:
            self.dropped += 1
        return record

    @property
    def spans(self) -> list[DispatchSpan]:
        """The dispatches of this trace, in the order they started."""
        return [DispatchSpan(self, record) for record in self.records]

    def hook_failed(self, entry: HookLike, error: BaseException, timed_out: bool) -> None:
        """Record that `entry` raised or timed out, on the newest open span that ran it."""
        for record in reversed(self.records):
            if record[0][0] == entry.event and record_failure(record, entry, error, timed_out):
                return

    def add(self, kind: str, started_ns: int | None = None, **data: Any) -> None:
        """Record a timeline item (`model`, `tool`, `tag`, `send`, `history`); `started_ns` defaults to now."""
        if len(self.items) >= MAX_ITEMS:
            self.dropped += 1
            return
        now = _now()
        start = started_ns if started_ns is not None else now
        data.update(type=kind, start_ms=self.ms(start), duration_ms=round((now - start) / 1e6, 3))
        self.items.append(data)

    def model_call(self, provider: str, req: RequestLike, resp: ResponseLike | None, started_ns: int, *,
                   streamed: bool = False, error: str | None = None) -> None:
        """Record one model call: the request's sections (with their source), tools and the answer or error."""
        self.add(
            "model",
            started_ns,
            provider=provider,
            model=(resp.model if resp is not None and resp.model else req.model) or "",
            streamed=streamed,
            system_prompt=[{"name": p.name, "source": p.source, "content": _cut(p.content)}
                           for p in req.system_prompt if p.content],
            tools=list(req.tool_set.names()),
            tool_choice=req.tool_choice,
            history_messages=len(req.messages),
            prompt_tokens=resp.usage.prompt_tokens if resp is not None else 0,
            completion_tokens=resp.usage.completion_tokens if resp is not None else 0,
            output=_cut(resp.text_response) if resp is not None else "",
            tool_calls=[{"name": c.name, "arguments": c.arguments} for c in resp.tool_calls] if resp else [],
            finish_reason=resp.finish_reason if resp is not None else "",
            error=error,
        )

    def tool_call(self, name: str, owner: str | None, arguments: Any, started_ns: int, *, result: str,
                  is_error: bool) -> None:
        """Record one tool call: its arguments and its result (or the error the model was shown)."""
        self.add("tool", started_ns, name=name, plugin_id=owner, arguments=arguments, result=_cut(result),
                 is_error=is_error)

    def tag(self, name: str, owner: str | None, value: str, attrs: dict[str, Any], started_ns: int, *,
            elements: Iterable[Any] = (), error: str | None = None) -> None:
        """Record one tag occurrence handled in the model's output."""
        self.add("tag", started_ns, name=name, plugin_id=owner, value=_cut(value, 500), attrs=attrs,
                 elements=[e.repr_text() for e in elements], error=error)

    def sent(self, chain: MessageChain, ok: bool, message_id: str = "", error: str | None = None) -> None:
        """Record one message sent to the platform."""
        self.add("send", text=_cut(chain.message_repr), elements=[type(e).__name__ for e in chain], ok=ok,
                 message_id=message_id, error=error)

    def history(self, messages: int, started_ns: int | None = None) -> None:
        """Record what the turn stored in history (`messages` chat messages)."""
        self.add("history", started_ns, messages=messages)

    def log(self, level: str, logger: str, message: str) -> None:
        """Record one log line written while this trace was current."""
        if len(self.logs) < MAX_LOGS:
            self.logs.append({"t_ms": self.ms(), "level": level, "logger": logger, "message": _cut(message, 2000)})
        else:
            self.dropped += 1

    # -- reading --------------------------------------------------------------------------------------------------

    def hook_calls(self) -> list[HookCall]:
        """Every hook call of the trace (its messages' first), in the order they ran."""
        calls = [c for m in self.messages for c in m.hook_calls()]
        return calls + [c for span in self.spans for c in span.hooks()]

    def timeline(self) -> list[dict[str, Any]]:
        """Dispatches and the other items, as JSON data sorted by start."""
        items = [span.to_dict() for span in self.spans] + [dict(i) for i in self.items]
        items.sort(key=lambda item: item["start_ms"])
        return items

    def to_dict(self) -> dict[str, Any]:
        """The whole trace as JSON data (computed once the trace is finished, then kept)."""
        if self._dict is not None:
            return self._dict
        end = self.ended_ns if self.ended_ns is not None else _now()
        out = {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "sid": self.sid,
            "started_at": self.started_at.isoformat(),
            "duration_ms": round((end - self.started_ns) / 1e6, 3),
            "outcome": self.outcome,
            "error": self.error,
            "messages": [m.to_dict() for m in self.messages],
            "timeline": self.timeline(),
            "logs": list(self.logs),
            "dropped": self.dropped,
        }
        if self.finished:
            self._dict = out
        return out

    def summary(self) -> dict[str, Any]:
        """A line's worth: id, kind, name, session, start, duration, outcome."""
        end = self.ended_ns if self.ended_ns is not None else _now()
        return {"id": self.id, "kind": self.kind, "name": self.name, "sid": self.sid,
                "started_at": self.started_at.isoformat(), "duration_ms": round((end - self.started_ns) / 1e6, 3),
                "outcome": self.outcome}

    def __repr__(self) -> str:
        return f"Trace({self.id!r}, {self.kind}, {self.name!r}, {self.outcome})"
