"""The live record of one trace: the dispatches of events through their hooks, with what each hook changed, and
the model calls, tool calls, tags, sends, history writes and log lines of the same turn.

Recording is kept cheap (one clock reading and one append per hook); everything a reader sees (durations, file and
line, the changes a hook made) is worked out when the trace is read, from what was captured while it ran.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain as _iter_chain
from itertools import compress, count, islice
from json.encoder import encode_basestring
from operator import is_not
from typing import Any, Protocol

from core.chat.message_utils import KiraMessageEvent, MessageChain
from core.prompt_manager import PROMPT_EDITS, Prompt, part_fields, section_fields
from core.tag import TagSet
from core.utils.text import json_encoder
from core.utils.tool_utils import ToolSet

__all__ = [
    "Trace",
    "DispatchSpan",
    "HookCall",
    "HookTable",
    "HOOK_FIELDS",
    "expand_rows",
    "extra_notes",
    "render_compact",
    "HookLike",
    "RequestLike",
    "ResponseLike",
    "UsageLike",
    "MAX_ITEMS",
    "MAX_LOGS",
    "TEXT_LIMIT",
    "clock",
]

#: At most this many dispatches, model calls, tool calls, tags and sends are kept per trace; later ones are counted.
MAX_ITEMS = 2_000
#: At most this many log lines are kept per trace.
MAX_LOGS = 500
#: Texts (prompts, outputs, arguments) are cut to this many characters in a trace.
TEXT_LIMIT = 4_000

_now = time.perf_counter_ns
#: A trace's wall-clock start is kept as nanoseconds since this (`Trace.started_unix_ns`) and goes to the JSON-lines
#: writer as microseconds (`Trace.compact`), where `isoformat()` would format the text through printf.
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
#: The clock of the readings in a dispatch record: `time.perf_counter_ns()`, the trace's own clock (`_now`). The int
#: costs the engine what a float would, and the writer turns it into microseconds with integer arithmetic alone.
clock = time.perf_counter_ns


class HookLike(Protocol):
    """What a trace reads of a hook in a resolved chain (the engine's `HookEntry`, a frozen dataclass: read-only)."""

    @property
    def fn(self) -> Callable[..., Any]: ...
    @property
    def plugin_id(self) -> str: ...
    @property
    def hook_name(self) -> str: ...
    @property
    def event(self) -> str: ...
    @property
    def priority(self) -> int: ...
    @property
    def deadline(self) -> float: ...


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
    model: str
    finish_reason: str

    @property
    def usage(self) -> UsageLike:  # read-only: `LLMResponse.usage` is a `TokenUsage`, which matches `UsageLike`
        ...


def _ms(ns: int) -> float:
    """Nanoseconds as milliseconds to the nearest microsecond: `round(ns / 1e6, 3)` in integers (`round()` of a float
    to some digits formats and parses it again, some 1.2 k instructions)."""
    return (ns + 500) // 1000 / 1000


def _cut(text: str, limit: int = TEXT_LIMIT) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


def _where(fn: Callable[..., Any]) -> tuple[str, int]:
    code = getattr(getattr(fn, "__func__", fn), "__code__", None)
    return (code.co_filename, code.co_firstlineno) if code is not None else ("?", 0)


# -- what a hook could change, per event: a snapshot taken before each hook and after the last ------------------


def _strategy(event: Any, args: tuple[Any, ...]) -> Any:
    return (event.strategy, event.strategy_forced)  # the member: its `.value` costs more, and only a reader needs it


def _user_text(parts: tuple[tuple[str, str, bool], ...]) -> str:
    """The user prompt's text from its snapshot, as `UserPrompt.text` joins it."""
    return "".join(content + end for content, end, _ in parts[:-1]) + parts[-1][0] if parts else ""


def _request(event: Any, args: tuple[Any, ...], last: Any = None) -> Any:
    """The snapshot of a model request, `args` being `(request, tag set)`: its sections, tools, tags and user prompt
    parts (the probe of `llm_request`; `_RequestRecord` takes it before the first hook and after each)."""
    return _request_state(args[0], args[1], last)[0]


class _Seen:
    """What a request's snapshot is reused by while no hook changes the request (`_RequestRecord`): `PROMPT_EDITS`'
    count when it was taken, the request's sections and user prompt parts (the `Prompt` objects themselves), its tool
    set and the versions of that set and of the tag set."""

    __slots__ = ("req", "edits", "prompts", "user", "tool_set", "tool_version", "tag_set", "tag_version")

    def __init__(self, req: Any, prompts: list[Prompt], user: list[Prompt], tool_set: ToolSet, tag_set: TagSet) -> None:
        self.req = req
        self.edits = PROMPT_EDITS.count
        self.prompts = prompts
        self.user = user
        self.tool_set = tool_set
        self.tool_version = tool_set.version
        self.tag_set = tag_set
        self.tag_version = tag_set.version

    def same_prompts(self) -> bool:
        """Whether the request holds the same sections and parts, none of them edited since."""
        req = self.req
        return (
            self.edits == PROMPT_EDITS.count
            and self.prompts == req.system_prompt
            and _list_eq(req.user_prompt, self.user)
        )


#: A `UserPrompt` compared as the list it is (its own `==` is Python, and also takes a `str`).
_list_eq = list.__eq__


def _request_state(req: Any, tag_set: Any, last: Any = None, same: _Seen | None = None) -> tuple[Any, _Seen | None]:
    """`_request`'s snapshot, and what it can be reused by (None when a section or part is not a `Prompt`, or a set
    not a `ToolSet` or `TagSet`). The tools' and tags' names are read only when their set's `version` moved since
    `last` (the snapshot before), the sections and parts only when `same` is None (else they are as `last` has them,
    `same` being its `_Seen`)."""
    reusable = True
    if same is not None:
        sections, parts, prompts, user = last[0], last[3], same.prompts, same.user
    else:
        prompts, user = list(req.system_prompt), list(req.user_prompt)
        # Tuples of strings: the garbage collector stops walking them once it has seen them.
        try:  # `Prompt`s, read in C from their slots
            sections, parts = _flat(map(section_fields, prompts)), tuple(map(part_fields, user))
        except AttributeError:  # another type, whose changes `PROMPT_EDITS` does not count: compared at each hook
            sections = tuple([field for p in prompts for field in (p.name, p.source, p.content)])
            parts = tuple([(p.content, p.end, p.persist) for p in user])  # the parts, not the list: edited in place
            reusable = False
    tool_set = req.tool_set
    if isinstance(tool_set, ToolSet):
        tool_version = tool_set.version
        tools = last[1] if last is not None and last[4] == tool_version else tuple(tool_set.names())
    else:
        tool_version, tools, reusable = None, (), False
    if isinstance(tag_set, TagSet):
        tag_version = tag_set.version
        tags = last[2] if last is not None and last[5] == tag_version else tuple(tag_set.names())
    else:
        tag_version, tags, reusable = None, (), False
    seen = _Seen(req, prompts, user, tool_set, tag_set) if reusable else None
    return (sections, tools, tags, parts, tool_version, tag_version), seen


def _flat(triples: Iterable[tuple[str, str, str]]) -> tuple[str, ...]:
    """`triples` one after another in one tuple: one object a request (a tuple per section is one more for the garbage
    collector to walk, a dozen a model call); `_triples` gives them back."""
    return tuple(_iter_chain.from_iterable(triples))


def _triples(flat: tuple[str, ...]) -> Iterator[tuple[str, str, str]]:
    """The `(name, source, content)` of each section of a flat snapshot (`_flat`)."""
    return zip(flat[0::3], flat[1::3], flat[2::3], strict=True)


def _sections(prompts: Iterable[Prompt]) -> tuple[str, ...]:
    """Each section's name, source and content, one after another (`_flat`)."""
    try:
        return _flat(map(section_fields, prompts))  # `Prompt`s, read in C from their slots
    except AttributeError:  # another type
        return tuple([field for p in prompts for field in (p.name, p.source, p.content)])


def _chain(event: Any, args: tuple[Any, ...]) -> Any:
    return [e.repr_text() for e in args[0]]  # a comprehension: a generator costs twice as much


_Probe = Callable[[Any, tuple[Any, ...]], Any]


def _request_probe(event: Any, args: tuple[Any, ...]) -> _Probe | None:
    return _request if len(args) == 2 else None


def _chain_probe(event: Any, args: tuple[Any, ...]) -> _Probe | None:
    return _chain if args and isinstance(args[0], MessageChain) else None


#: Events whose hooks can change something the trace shows (a strategy, the request, an outgoing chain), with the
#: function that picks the snapshot for one dispatch's arguments (None: nothing to watch).
PROBES: dict[str, Callable[[Any, tuple[Any, ...]], _Probe | None]] = {
    "llm_request": _request_probe,
    "after_xml_parse": _chain_probe,
}
#: The events of `PROBES` whose snapshot the event's type alone picks (checked in place: a call to a picker costs
#: as much as five hooks' clock readings): the type an event must be, and its snapshot.
TYPED_PROBES: dict[str, tuple[type, _Probe]] = {
    "im_message": (KiraMessageEvent, _strategy),
    "message_buffered": (KiraMessageEvent, _strategy),
}


def pick_probe(event_name: str, event: Any, args: tuple[Any, ...]) -> _Probe | None:
    """The snapshot to take of `event_name`'s dispatch of `event` and `args` before and after each hook, or None."""
    typed = TYPED_PROBES.get(event_name)
    if typed is not None:
        return typed[1] if isinstance(event, typed[0]) else None
    pick = PROBES.get(event_name)
    return pick(event, args) if pick is not None else None


def _changes(probe: Any, before: Any, after: Any) -> tuple[list[str], dict[str, Any] | None]:
    """What changed between two snapshots, as lines a reader understands, and the strategy set (if any)."""
    if before is None or after is None or before == after:
        return [], None
    if probe is _strategy:
        strategy = {"strategy": after[0].value, "force": after[1]}
        return [f"strategy {before[0].value} -> {after[0].value}" + (" (force)" if after[1] else "")], strategy
    if probe is _chain:
        return [f"chain {''.join(before)!r} -> {''.join(after)!r}"], None
    lines: list[str] = []
    (p0, t0, g0, u0), (p1, t1, g1, u1) = before[:4], after[:4]  # then the sets' versions
    # A hook mostly changes one of these: the others are compared whole (in C) before they are walked.
    if p0 != p1:
        old = {(name, i): (source, content) for i, (name, source, content) in enumerate(_triples(p0))}
        for i, (name, source, content) in enumerate(_triples(p1)):
            known = old.get((name, i))
            if known is None:
                lines.append(f"prompt section {name!r} added (source {source!r}): {_cut(content, 200)!r}")
            elif known[1] != content:
                lines.append(f"prompt section {name!r} edited: {_cut(content, 200)!r}")
        if len(p1) < len(p0):
            lines.append(f"{(len(p0) - len(p1)) // 3} prompt section(s) removed")
    if t0 != t1:
        lines += [f"tool {name!r} added" for name in t1 if name not in t0]
        lines += [f"tool {name!r} removed" for name in t0 if name not in t1]
    if g0 != g1:
        lines += [f"tag <{name}> added" for name in g1 if name not in g0]
        lines += [f"tag <{name}> removed" for name in g0 if name not in g1]
    if u0 != u1:
        lines.append(f"user prompt edited: {_cut(_user_text(u1), 200)!r}")
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
    """The rarely needed part of a dispatch record: snapshots, failures, the end, a stop, an own trace."""

    __slots__ = ("probe", "obj", "args", "states", "failures", "ended", "stopped", "owned")

    def __init__(self, probe: Callable[[Any, tuple[Any, ...]], Any] | None, obj: Any, args: tuple[Any, ...]) -> None:
        self.probe = probe
        self.obj = obj
        self.args: tuple[Any, ...] | None = args  # None once the record ended (the ring keeps no event alive)
        self.states: list[Any] = []  # the event before the first hook, then after each hook
        self.failures: dict[int, tuple[str, str, str | None]] | None = None  # made at the first (most have none)
        self.ended = False
        self.stopped = False
        self.owned: tuple[Any, Any] | None = None  # (trace, context token) of a trace the dispatch started itself


class _ClosingRecord(list):
    """A dispatch record the engine closes with `Tracer.dispatched` even when its event was not stopped."""

    __slots__ = ()


#: `list.append` itself, for the records below, whose own `append` is the engine's mark.
_list_append = list.append


class _ProbedRecord(_ClosingRecord):
    """A dispatch record whose event a hook can visibly change: each mark also snapshots the event. `extra` is
    `record[1]`, read as a slot: indexing a list subclass goes through a generic method call."""

    __slots__ = ("extra",)

    def __init__(self, chain: tuple[HookLike, ...], extra: _Extra) -> None:
        super().__init__((chain, extra, clock()))
        self.extra: Any = extra  # `_Extra`, whose `probe` and `args` are set until the record ends

    def append(self, at: int) -> None:  # the engine's `mark`
        extra = self.extra
        states = extra.states
        state = extra.probe(extra.obj, extra.args)
        # Most hooks change nothing: keep the previous snapshot, so a trace holds one per change, not one per hook
        # (the retained snapshots, not the taking, are what made the garbage collector run often).
        states.append(states[-1] if state == states[-1] else state)
        _list_append(self, at)


class _StrategyRecord(_ClosingRecord):
    """A record of a message's strategy: the event tells it of each change (`KiraMessageEvent.strategy_watcher`),
    so a mark is a plain append; the snapshots after the hooks that changed nothing are filled in when it ends."""

    __slots__ = ("extra", "outer")

    def __init__(self, chain: tuple[HookLike, ...], extra: _Extra) -> None:
        super().__init__((chain, extra, clock()))
        self.extra: Any = extra  # `_Extra`, whose `obj` is the event until the record ends
        event = extra.obj
        self.outer = event.strategy_watcher  # a dispatch of the same event that this one runs in
        event.strategy_watcher = self.changed

    def changed(self, event: KiraMessageEvent) -> None:
        """The event's strategy changed while the hook after the last reading runs."""
        states = self.extra.states
        running = len(self) - READINGS - 1
        # `states[i]` is the snapshot before hook i; one more is what the running hook left so far.
        if len(states) > running:
            del states[running + 1 :]
        else:
            states += [states[-1]] * (running + 1 - len(states))
        state = (event.strategy, event.strategy_forced)
        if state != states[-1]:
            states.append(state)

    def close(self) -> None:
        """The dispatch is over: a snapshot after every hook, and the event watched as before."""
        states = self.extra.states
        states += [states[-1]] * (len(self) - READINGS - len(states))
        self.extra.obj.strategy_watcher = self.outer


class _RequestRecord(_ProbedRecord):
    """A probed record of a model request: the last snapshot is reused while no `Prompt` was edited since, the
    request holds the same sections and user prompt parts, and its tool and tag sets' versions stay. `seen` is what
    says so (`_Seen`, None when the request holds other types); the snapshots after hooks that changed nothing are
    filled in at the next change or when the record closes, as `_StrategyRecord` does."""

    __slots__ = ("seen",)

    def __init__(self, chain: tuple[HookLike, ...], extra: _Extra, seen: _Seen | None) -> None:
        super().__init__(chain, extra)
        self.seen = seen

    def append(self, at: int) -> None:  # the engine's `mark`
        seen = self.seen
        # Most hooks change nothing: a count, two lists compared by their items' identities (in C), a set's identity
        # and two versions say so, where reading every section's three fields cost some 16 k instructions a hook.
        if seen is not None:
            req = seen.req
            if (
                seen.edits == PROMPT_EDITS.count
                and seen.prompts == req.system_prompt
                and _list_eq(req.user_prompt, seen.user)
                and req.tool_set is seen.tool_set
                and seen.tool_set.version == seen.tool_version
                and seen.tag_set.version == seen.tag_version
            ):
                _list_append(self, at)
                return
        extra = self.extra
        states = extra.states
        last = states[-1]
        # `states[i]` is the snapshot before hook i: the hooks since the last one kept it.
        states += [last] * (len(self) - READINGS - len(states))
        req, tag_set = extra.args
        state, self.seen = _request_state(
            req, tag_set, last, seen if seen is not None and seen.same_prompts() else None
        )
        states.append(last if state == last else state)
        _list_append(self, at)

    def close(self) -> None:
        """The dispatch is over: a snapshot after every hook, and the request let go."""
        states = self.extra.states
        states += [states[-1]] * (len(self) - READINGS - len(states))
        self.seen = None


_RECORDS: dict[Any, type[_ProbedRecord | _StrategyRecord]] = {_strategy: _StrategyRecord}


#: Where a dispatch record's clock readings begin (after the chain and the `_Extra` slot).
READINGS = 2


def new_record(
    event_name: str, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...], *, closing: bool = False
) -> list[Any]:
    """The raw record of one dispatch, kept as cheap as the tracing-on benchmark needs: a flat list
    `[chain, _Extra or None, t0, t1, ...]` of the resolved chain (its entries name the event), the rare part,
    and `clock()` readings: `t0` when the dispatch started, then one after each hook (the hooks run in chain
    order, so hook i ran from reading i to reading i + 1: the end of one hook is the start of the next). The engine
    appends the readings (`record.append(clock())`). A plain `list` needs no closing unless its event was stopped;
    a probed record (or one asked `closing`) is a `_ClosingRecord`, closed at the end by `Tracer.dispatched`."""
    probe = pick_probe(event_name, event, args)
    if probe is None:
        return _ClosingRecord((chain, None, clock())) if closing else [chain, None, clock()]
    return probed_record(probe, event, args, chain)


def probed_record(probe: _Probe, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...]) -> list[Any]:
    """The record of a dispatch whose event `probe` snapshots: now, and after each hook."""
    extra = _Extra(probe, event, args)
    if probe is _request:  # with what the next hooks' snapshots reuse it by
        state, seen = _request_state(*args)
        extra.states.append(state)
        return _RequestRecord(chain, extra, seen)
    extra.states.append(probe(event, args))
    return _RECORDS.get(probe, _ProbedRecord)(chain, extra)


def end_record(record: list[Any], event: Any) -> _Extra:
    """Close a dispatch record that needs more than its readings: release the event a probed record holds (no event
    is kept alive in the ring), note whether a hook stopped the event. Returns the record's `_Extra`."""
    extra = record[1]
    if extra is None:
        extra = record[1] = _Extra(None, None, ())
    elif type(record) is _StrategyRecord or type(record) is _RequestRecord:
        record.close()
    extra.ended = True
    extra.obj = extra.args = None
    if event.is_stopped:
        extra.stopped = True
    return extra


def abandon_record(record: list[Any]) -> tuple[Any, Any] | None:
    """A dispatch record whose dispatch ended by an exception (cancelled from outside): the event's strategy watched
    as before the dispatch, the event and the request let go; its readings stay as they are, so the hook that was
    running ends with the trace. Returns the (trace, context token) of a trace the dispatch started for itself."""
    extra = record[1]
    if extra is None:
        return None
    if type(record) is _StrategyRecord or type(record) is _RequestRecord:
        record.close()
    extra.obj = extra.args = None
    return extra.owned


def record_failure(record: list[Any], entry: HookLike, error: BaseException, timed_out: bool) -> bool:
    """Note that `entry` raised or passed its deadline; False when `entry` did not run in this dispatch."""
    chain = record[0]
    # The hook that failed is the one running now (the first without a reading after it), or, reported after the
    # chain (it swallowed its cancellation), one that has ended: search back from the running one.
    for index in range(min(len(record) - READINGS - 1, len(chain) - 1), -1, -1):
        if chain[index] is entry:
            extra = record[1]
            if extra is None:
                extra = record[1] = _Extra(None, None, ())
            tb = None if timed_out else "".join(traceback.format_exception(error))
            if extra.failures is None:
                extra.failures = {}
            extra.failures[index] = ("timed_out" if timed_out else "raised", f"{type(error).__name__}: {error}", tb)
            return True
    return False


def _outcome(
    extra: _Extra | None, i: int, done: int
) -> tuple[str, str | None, str | None, dict[str, Any] | None, list[str]]:
    """How hook `i` of a dispatch ended, of `done` hooks with a reading after them, from its record's `extra`:
    `(outcome, error, traceback, strategy, changes)`."""
    if extra is None:
        return ("returned" if i < done else "cancelled"), None, None, None, []
    states = extra.states if extra.probe is not None else None
    if states is not None and i + 1 < len(states):
        changes, strategy = _changes(extra.probe, states[i], states[i + 1])
    else:
        changes, strategy = [], None
    failure = extra.failures.get(i) if extra.failures is not None else None
    if failure is not None:
        return (*failure, strategy, changes)
    if i == done:
        return "cancelled", None, None, strategy, changes
    if i == done - 1 and extra.stopped:
        return "stopped", None, None, strategy, changes
    return "returned", None, None, strategy, changes


class DispatchSpan:
    """One dispatch of an event through its hook chain, read from its raw record: `hooks()` and `to_dict()`."""

    def __init__(self, trace: Trace, record: list[Any]) -> None:
        self.trace = trace
        self.chain: tuple[HookLike, ...] = record[0]
        self.event = self.chain[0].event if self.chain else ""
        self.extra: _Extra | None = record[1]
        # `clock()` readings: nanoseconds, the unit of the trace's other times
        self.start_at: int = record[READINGS]
        self.ends: list[int] = record[READINGS + 1 :]  # after each hook that returned
        # Ended: every hook ran, or the engine closed the record (a stop, a probed event, an own trace). Otherwise
        # the hook after the last reading is still running, or was running when the dispatch was cancelled.
        self.ended = len(self.ends) == len(self.chain) or (self.extra is not None and self.extra.ended)

    @property
    def end_at(self) -> int | None:
        """The reading when the dispatch ended, None while it runs (or when it was cancelled)."""
        if not self.ended:
            return None
        return self.ends[-1] if self.ends else self.start_at

    def _calls(
        self,
    ) -> Iterator[tuple[int, float, float, str, str | None, str | None, dict[str, Any] | None, list[str]]]:
        """Each hook that ran, in order: `(index in the chain, start, end, outcome, error, traceback, strategy,
        changes)`, the times as nanosecond readings. What `hooks()` is made of."""
        ends = self.ends
        done = len(ends)
        running = not self.ended and done < len(self.chain)  # hook `done` started and has no end (yet)
        open_end = self.trace.ended_ns or _now()
        at = self.start_at
        for i in range(done + 1 if running else done):
            until = ends[i] if i < done else open_end
            yield i, at, until, *self.outcome_of(i, done)
            at = until

    def outcome_of(self, i: int, done: int) -> tuple[str, str | None, str | None, dict[str, Any] | None, list[str]]:
        """How hook `i` ended, of `done` hooks with a reading after them: `(outcome, error, traceback, strategy,
        changes)`."""
        return _outcome(self.extra, i, done)

    def hooks(self) -> list[HookCall]:
        """The hooks that ran, in order."""
        base = self.trace.started_ns
        calls: list[HookCall] = []
        for i, at, until, outcome, error, tb, strategy, changes in self._calls():
            entry = self.chain[i]
            file, line = _where(entry.fn)
            calls.append(
                HookCall(
                    entry.event,
                    entry.plugin_id,
                    entry.hook_name,
                    file,
                    line,
                    entry.priority,
                    entry.deadline,
                    (at - base) / 1e6,
                    (until - at) / 1e6,
                    outcome,
                    error,
                    tb,
                    strategy,
                    changes,
                )
            )
        return calls

    def _bounds(self) -> tuple[int, int]:
        start = self.start_at
        end = self.end_at
        if end is None:
            end = self.trace.ended_ns or _now()
        return start, end

    def to_dict(self) -> dict[str, Any]:
        """The dispatch as a timeline item."""
        base = self.trace.started_ns - 500
        start, end = self._bounds()
        # Whole microseconds since the trace started, in integers, as the JSON-lines file's readings: the file gives
        # the same start and duration (its rows carry only the readings).
        first, last = (start - base) // 1000, (end - base) // 1000
        hooks = self.hooks()
        stopped_by = next((f"{h.plugin_id}.{h.function}" for h in hooks if h.outcome == "stopped"), None)
        return {
            "type": "event",
            "event": self.event,
            "start_ms": first / 1e3,
            "duration_ms": (last - first) / 1e3,
            "hooks": [h.to_dict() for h in hooks],
            "stopped_by": stopped_by,
        }


def compact_record(trace: Trace, record: list[Any], table: HookTable, extras: list[Any]) -> tuple[Any, ...] | dict:
    """A dispatch of `trace` as plain data for the JSON-lines writer, from its raw `record`, on the event loop: only
    what needs the live objects, so the rendering (`render_compact`) can run elsewhere. Mostly `(number,
    readings)`: the number of its chain in `table` and its raw clock readings (the first hook's start, then each
    hook's end). A dispatch the engine ended with more to say (a probe's snapshots that changed, a failure, a stop)
    is `(number, readings, k)`, what its notes are made of put in `extras` at `k` (`(probe, snapshots, failures,
    stopped)`: plain data once the record ended, but for the probe, a function found by name). One still running or
    cancelled, or with an empty chain, is rendered here at once: the dict `render_compact` gives such a dispatch."""
    chain, extra = record[0], record[1]
    if chain:
        if extra is None:
            if len(record) - READINGS - 1 == len(chain):
                return (table.chain(chain), record[READINGS:])
        elif extra.ended:
            failures, stopped, probe = extra.failures, extra.stopped, extra.probe
            if probe is not None:
                states = extra.states
                # A hook that changed nothing left the snapshot before it in place: compared by identity, in C (a
                # comparison by value walks each changed snapshot whole).
                if not any(map(is_not, states, islice(states, 1, None))):
                    probe = None
            if probe is None and not failures and not stopped:
                return (table.chain(chain), record[READINGS:])
            # What the notes are made of, not the `_Extra` itself: that may hold the token of a trace it started.
            extras.append((probe, extra.states if probe is not None else None, failures, stopped))
            return (table.chain(chain), record[READINGS:], len(extras) - 1)
    readings = record[READINGS:]
    base = trace.started_ns - 500
    done = len(readings) - 1
    ended = done == len(chain) or (extra is not None and extra.ended)
    notes = _notes(extra, done, ended) if extra is not None else {}
    at = [(reading - base) // 1000 for reading in readings]
    if not ended:
        at.append(((trace.ended_ns or _now()) - base) // 1000)
    names = [(entry.event, entry.plugin_id, entry.hook_name) for entry in chain]
    return _noted_item(table.chain(chain), at, names, notes)


def _noted_item(
    number: int, at: list[int], names: list[tuple[str, str, str]] | list[list[Any]], notes: dict[str, dict[str, Any]]
) -> dict[str, Any]:
    """A dispatch with notes as the file keeps it (`names`: each hook's event, plugin id and function)."""
    stopped = next((int(i) for i, note in notes.items() if note.get("outcome") == "stopped"), None)
    out: dict[str, Any] = {
        "type": "event",
        "event": names[0][0] if names else "",
        "start_ms": at[0] / 1e3,
        "duration_ms": (at[-1] - at[0]) / 1e3,
        "chain": number,
        "at": at,
        "stopped_by": None if stopped is None else f"{names[stopped][1]}.{names[stopped][2]}",
    }
    if notes:
        out["notes"] = notes
    return out


def extra_notes(made_of: tuple[Any, ...] | dict[str, Any], readings: int) -> dict[str, dict[str, Any]]:
    """The notes of an ended dispatch with `readings` clock readings, from what `compact_record` put in `extras` for
    it (given back as they are when they are its notes already: a writer that cannot be sent a snapshot that does not
    pickle is sent the notes)."""
    if isinstance(made_of, dict):
        return made_of
    probe, states, failures, stopped = made_of
    if probe is not None and not failures and not stopped:
        # The common case, `_notes` without its other cases: the hooks that changed what the probe watches (an
        # unchanged snapshot is the previous object), each noted with its changes alone.
        notes: dict[str, dict[str, Any]] = {}
        for i in compress(count(), map(is_not, states, islice(states, 1, None))):
            if i < readings - 1:
                changes, strategy = _changes(probe, states[i], states[i + 1])
                note: dict[str, Any] = {} if strategy is None else {"strategy": strategy}
                if changes:
                    note["changes"] = changes
                if note:
                    notes[str(i)] = note
        return notes
    extra = _Extra(made_of[0], None, ())
    extra.states = made_of[1] or []
    extra.failures = made_of[2]
    extra.stopped = made_of[3]
    extra.ended = True
    return _notes(extra, readings - 1, True)


def render_compact(
    texts: tuple[Any, ...] | list[Any], numbers: tuple[Any, ...] | list[Any], extras: list[Any], table: HookTable
) -> str:
    """A trace as the JSON-lines file has it (the line's JSON text, without its newline), from `Trace.compact()`'s
    plain data: each dispatch a row `[number, *at]`, the readings in microseconds since the trace started, from which
    a reader works out everything else, or (a hook that did more than return) an object with the same `chain` and
    `at` plus `notes` by hook index for those hooks; `expand_rows` turns both back into `hooks`. `extras` are what
    the data's notes are made of (or the notes, from `extra_notes`); `table` names the chains (its `hooks` and
    `chains` as the event loop's table numbered them) and numbers the system prompt sections seen before. The
    writer's work, off the event loop: the text is what `json.dumps(..., ensure_ascii=False, default=str,
    separators=(",", ":"))` gives of the trace's dict, the rows (plain ints) joined in C rather than encoded."""
    trace_id, kind, name, sid, started_at, outcome, error, items, logs, dropped, messages = texts
    started_ns, ended_ns, records, message_numbers = numbers
    base = started_ns - 500  # to the nearest microsecond in integers (half the cost of float arithmetic and `round()`)
    starts: list[float] = []  # each timeline part's `start_ms`, which orders them
    parts: list[Any] = []  # a row's `(number, readings)`, or the JSON text of any other part
    for entry in records:
        if type(entry) is dict:
            starts.append(entry["start_ms"])
            parts.append(_json(entry))
            continue
        readings = entry[1]
        starts.append((readings[0] - base) // 1000 / 1e3)
        if len(entry) == 3:
            notes = extra_notes(extras[entry[2]], len(readings))
            if notes:
                hooks = table.hooks
                names = [hooks[n - 1] for n in table.chains[entry[0] - 1]]
                at = [(reading - base) // 1000 for reading in readings]
                parts.append(_json(_noted_item(entry[0], at, names, notes)))
                continue
        parts.append(entry)
    for item in items:
        starts.append(item["start_ms"])
        parts.append(_json(_compact_item(item, table)))
    # The rows' ints go into one `%` format, in C: `str()` or the encoder at each int cost twice as much.
    formats: list[str] = []
    values: list[Any] = []
    for i in sorted(range(len(parts)), key=starts.__getitem__):
        part = parts[i]
        if type(part) is str:
            formats.append("%s")
            values.append(part)
        else:
            readings = part[1]
            formats.append(_ROW_FORMATS.get(len(readings)) or _row_format(len(readings)))
            values.append(part[0])
            values += [(reading - base) // 1000 for reading in readings]
    timeline = ",".join(formats) % tuple(values)
    nested = ",".join([render_compact(t, n, extras, table) for t, n in zip(messages, message_numbers, strict=True)])
    return (
        f'{{"id":{_value(trace_id)},"kind":{_value(kind)},"name":{_value(name)},"sid":{_value(sid)},'
        f'"started_at":"{(_EPOCH + timedelta(microseconds=started_at)).isoformat()}",'
        f'"duration_ms":{round((ended_ns - started_ns) / 1e6, 3)!r},"outcome":{_value(outcome)},'
        f'"error":{_value(error)},"messages":[{nested}],"timeline":[{timeline}],'
        f'"logs":{_json(logs) if logs else "[]"},"dropped":{_value(dropped)}}}'
    )


#: `json.dumps(value, ensure_ascii=False, default=str, separators=(",", ":"))`, its C encoder made once (`dumps`
#: makes one at each call, which cost more than encoding a timeline item). Plain data from the pipe holds no cycle.
_json = json_encoder((",", ":"), str)


#: The `%` format of a row by its number of readings (`_row_format`).
_ROW_FORMATS: dict[int, str] = {}


def _row_format(readings: int) -> str:
    """The format of a row `[number, *at]` of `readings` readings, remembered for the next ones."""
    form = _ROW_FORMATS[readings] = "[%d" + ",%d" * readings + "]"
    return form


def _value(value: Any) -> str:
    """`value` as `_json` gives it, a string, None or an int without the encoder's setting up."""
    if type(value) is str:
        return encode_basestring(value)
    if value is None:
        return "null"
    if type(value) is int:
        return str(value)
    return _json(value)


def _notes(extra: _Extra, done: int, ended: bool) -> dict[str, dict[str, Any]]:
    """The notes of a dispatch's hooks that did more than return, by index as text (see `compact_record`)."""
    # The hooks that can have a note: a failure, a change of what the probe watches (an unchanged snapshot is the
    # previous object), the stop, the hook that was running.
    candidates = set(extra.failures or ())
    if extra.probe is not None:
        states = extra.states
        # Most hooks change nothing, leaving the snapshot before them in place: compared in C, not a loop.
        if states.count(states[0]) != len(states):
            candidates.update(compress(count(), map(is_not, states, islice(states, 1, None))))
    if extra.stopped and done:
        candidates.add(done - 1)
    if not ended:
        candidates.add(done)
    notes = {}
    for i in sorted(candidates):
        if i >= (done if ended else done + 1):
            continue
        outcome, error, tb, strategy, changes = _outcome(extra, i, done)
        if outcome != "returned" or strategy is not None or changes:
            # Only what differs from a hook that returned and changed nothing (`expand_rows` starts from that).
            note: dict[str, Any] = {"outcome": outcome} if outcome != "returned" else {}
            if error is not None:
                note["error"] = error
            if tb is not None:
                note["traceback"] = tb
            if strategy is not None:
                note["strategy"] = strategy
            if changes:
                note["changes"] = changes
            notes[str(i)] = note
    return notes


#: The fields of a hook in a JSON-lines file's hook table, in this order.
HOOK_FIELDS = ("event", "plugin_id", "function", "file", "line", "priority", "deadline")


#: At most this many prompt sections are numbered in a JSON-lines writer's table; later ones are written in full.
MAX_SECTIONS = 1_024


class HookTable:
    """The hooks, chains and prompt sections a JSON-lines writer has named so far, each numbered from 1 the first
    time a trace shows it: a dispatch in the file gives its chain's number rather than a dict of fourteen fields per
    hook, and a model call the numbers of its system prompt's sections rather than their text.

    `chain(chain)` is the number of a resolved chain (remembered per chain object, which the engine keeps while its
    plugins stay), `section(name, source, content)` the number of a section seen before (None for one seen the first
    time, or once `MAX_SECTIONS` are numbered: written in full, so sections that change at every turn, such as the
    time, never fill the table); `hooks`, `chains` and `sections` are the descriptions so far (`HOOK_FIELDS` values;
    a chain's hook numbers; a section's name, source and content), which the file's table lines give. The event
    loop's table numbers the chains (`JsonLinesSink.write`); the writer's learns them (`learn`) and numbers the
    sections."""

    def __init__(self) -> None:
        self.hooks: list[list[Any]] = []
        self.chains: list[list[int]] = []
        self.sections: list[list[str]] = []
        self._hook_numbers: dict[tuple[Any, ...], int] = {}
        self._chain_numbers: dict[tuple[int, ...], int] = {}
        #: id(chain) -> (chain, number) of the chains numbered lately (read in place by `Trace.compact`)
        self.known: dict[int, tuple[tuple[HookLike, ...], int]] = {}
        self._section_numbers: dict[tuple[str, str, str], int] = {}
        self._seen_once: set[tuple[str, str, str]] = set()

    def section(self, section: tuple[str, str, str]) -> int | None:
        """The number of a prompt section `(name, source, content)`, or None to write it in full."""
        number = self._section_numbers.get(section)
        if number is not None:
            return number
        if section not in self._seen_once:
            if len(self._seen_once) >= 4 * MAX_SECTIONS:
                self._seen_once.clear()
            self._seen_once.add(section)
            return None
        if len(self.sections) >= MAX_SECTIONS:
            return None
        name, source, content = section
        self.sections.append([name, source, _cut(content)])
        number = self._section_numbers[section] = len(self.sections)
        return number

    def learn(self, first_hook: int, hooks: list[list[Any]], first_chain: int, chains: list[list[int]]) -> None:
        """Take the descriptions of the hooks numbered from `first_hook + 1` and the chains from `first_chain + 1`
        as another table numbered them (a writer's table names the chains the event loop's table numbered)."""
        self.hooks[first_hook : first_hook + len(hooks)] = hooks
        self.chains[first_chain : first_chain + len(chains)] = chains

    def chain(self, chain: tuple[HookLike, ...]) -> int:
        """The number of `chain`."""
        known = self.known.get(id(chain))
        if known is not None and known[0] is chain:
            return known[1]
        if len(self.known) >= 1024:  # chains of plugins reloaded many times: forget them, numbers stay
            self.known.clear()
        hooks = tuple(self._hook(entry) for entry in chain)
        number = self._chain_numbers.get(hooks)
        if number is None:
            self.chains.append(list(hooks))
            number = self._chain_numbers[hooks] = len(self.chains)
        self.known[id(chain)] = (chain, number)  # the chain is held, so its id is not reused meanwhile
        return number

    def _hook(self, entry: HookLike) -> int:
        file, line = _where(entry.fn)
        key = (entry.event, entry.plugin_id, entry.hook_name, file, line, entry.priority, entry.deadline)
        number = self._hook_numbers.get(key)
        if number is None:
            self.hooks.append(list(key))
            number = self._hook_numbers[key] = len(self.hooks)
        return number


_UNKNOWN_HOOK = ("?", "?", "?", "?", 0, 0, 0.0)


def expand_rows(
    item: list[int] | dict[str, Any],
    hooks: dict[str, list[Any]],
    chains: dict[str, list[int]],
    sections: dict[str, list[str]] | None = None,
) -> dict[str, Any]:
    """A timeline item as read from a JSON-lines file, a dispatch's row (or its `chain` and `at`) turned back into
    the `hooks` of `DispatchSpan.to_dict()`, and a model call's numbered sections into their dicts, with the file's
    tables (number as text -> `HOOK_FIELDS` values, hook numbers, or a section's name, source and content)."""
    if isinstance(item, list):
        item = _row_item(item, hooks, chains)
    if "at" not in item:
        prompt = item.get("system_prompt")
        if type(prompt) is list:
            item["system_prompt"] = [
                dict(zip(("name", "source", "content"), (sections or {}).get(str(p), ("?", "?", "?")), strict=True))
                if type(p) is int
                else p
                for p in prompt
            ]
        return item
    at = item.pop("at")
    chain = chains.get(str(item.pop("chain")), [])
    notes = item.pop("notes", {})
    out = []
    for i in range(len(at) - 1):
        described = hooks.get(str(chain[i])) if i < len(chain) else None
        hook: dict[str, Any] = dict(zip(HOOK_FIELDS, described or _UNKNOWN_HOOK, strict=True))
        hook.update(start_ms=at[i] / 1e3, duration_ms=(at[i + 1] - at[i]) / 1e3, outcome="returned", error=None)
        hook.update(traceback=None, strategy=None, changes=[])
        hook.update(notes.get(str(i), ()))
        out.append(hook)
    item["hooks"] = out
    item["stopped_by"] = item.pop("stopped_by", None)  # the key order of `DispatchSpan.to_dict()`
    return item


def _row_item(row: list[int], hooks: dict[str, list[Any]], chains: dict[str, list[int]]) -> dict[str, Any]:
    """A dispatch's row `[chain, *at]` as the object the file gives a dispatch with notes (see `compact_record`)."""
    at = row[1:]
    chain = chains.get(str(row[0]), [])
    first = hooks.get(str(chain[0])) if chain else None
    return {
        "type": "event",
        "event": first[0] if first else "?",
        "start_ms": at[0] / 1e3,
        "duration_ms": (at[-1] - at[0]) / 1e3,
        "chain": row[0],
        "at": at,
    }


def _compact_item(item: dict[str, Any], table: HookTable) -> dict[str, Any]:
    """`_rendered(item)` as the JSON-lines file keeps it: a model call's sections seen before as their numbers in
    `table` (the same system prompt, some 2 KB, is in every turn)."""
    sections = item.get("system_prompt")
    if type(sections) is not tuple:
        return item
    out = dict(item)
    section = table.section
    out["system_prompt"] = [
        section(p) or {"name": p[0], "source": p[1], "content": _cut(p[2])} for p in _triples(sections) if p[2]
    ]
    return out


def _rendered(item: dict[str, Any]) -> dict[str, Any]:
    """A copy of a timeline item as JSON data: a model call's sections, kept as one tuple of their names, sources
    and contents while the turn runs (`_sections`), become dicts (the empty ones left out)."""
    out = dict(item)
    sections = out.get("system_prompt")
    if type(sections) is tuple:
        out["system_prompt"] = [{"name": n, "source": s, "content": _cut(c)} for n, s, c in _triples(sections) if c]
    return out


class Trace:
    """Everything one turn (or one message, or one event outside a turn) went through, in order.

    `kind` is `turn`, `message` or `event`; `id` is put into every log line written while the trace is current.
    Messages merged into a turn are kept as its `messages` (their own traces, with their `im_message` hooks).
    """

    __slots__ = (
        "tracer",
        "id",
        "kind",
        "name",
        "sid",
        "started_unix_ns",
        "started_ns",
        "ended_ns",
        "outcome",
        "error",
        "messages",
        "records",
        "items",
        "logs",
        "dropped",
        "_dict",
        "__weakref__",
    )

    def __init__(self, tracer: Any, trace_id: str, kind: str, name: str, sid: str | None = None) -> None:
        self.tracer = tracer
        self.id = trace_id
        self.kind = kind
        self.name = name
        self.sid = sid
        self.started_unix_ns = time.time_ns()  # a third of `datetime.now(UTC)`'s cost: `started_at` makes that
        self.started_ns = _now()
        self.ended_ns: int | None = None
        self.outcome = "running"
        self.error: str | None = None
        # `messages`, `items` and `logs` start as the shared empty tuple and become lists at their first item: a
        # message's trace has none of them, a turn's mostly no logs (each list, kept in the ring, is one more object
        # for the garbage collector to walk).
        self.messages: list[Trace] | tuple[()] = ()
        self.records: list[list[Any]] = []  # raw dispatch records (see `new_record`)
        self.items: list[dict[str, Any]] | tuple[()] = ()  # model calls, tool calls, tags, sends, history
        self.logs: list[dict[str, Any]] | tuple[()] = ()
        self.dropped = 0
        self._dict: dict[str, Any] | None = None

    # -- recording ------------------------------------------------------------------------------------------------

    @property
    def started_at(self) -> datetime:
        """When the trace started, by the wall clock (UTC, to the microsecond)."""
        return _EPOCH + timedelta(microseconds=self.started_unix_ns // 1000)

    @property
    def finished(self) -> bool:
        """True once the trace is complete and stored."""
        return self.ended_ns is not None

    def ms(self, at_ns: int | None = None) -> float:
        """Milliseconds since the trace started (now, or at `at_ns`, a `time.perf_counter_ns()` reading)."""
        return _ms((at_ns if at_ns is not None else _now()) - self.started_ns)

    def dispatch(
        self, event_name: str, event: Any, args: tuple[Any, ...], chain: tuple[HookLike, ...], *, closing: bool = False
    ) -> list[Any]:
        """Open the record of one dispatch through `chain` (see `new_record`; `Tracer.dispatch` has the fast way)."""
        record = new_record(event_name, event, args, chain, closing=closing)
        if len(self.records) < MAX_ITEMS:
            self.records.append(record)
        else:
            self.dropped += 1
        return record

    def adopt(self, message: Trace) -> None:
        """Keep the trace of a message this turn merged (its `im_message` hooks ran before the turn began)."""
        messages = self.messages
        if isinstance(messages, tuple):
            self.messages = [message]
        else:
            messages.append(message)

    @property
    def spans(self) -> list[DispatchSpan]:
        """The dispatches of this trace, in the order they started."""
        return [DispatchSpan(self, record) for record in self.records]

    def hook_failed(self, entry: HookLike, error: BaseException, timed_out: bool) -> None:
        """Record that `entry` raised or timed out, on the newest span that ran it."""
        for record in reversed(self.records):
            if record[0][0].event == entry.event and record_failure(record, entry, error, timed_out):
                return

    def add(self, kind: str, started_ns: int | None = None, **data: Any) -> None:
        """Record a timeline item (`model`, `tool`, `tag`, `send`, `history`); `started_ns` defaults to now."""
        if len(self.items) >= MAX_ITEMS:
            self.dropped += 1
            return
        now = _now()
        start = started_ns if started_ns is not None else now
        data.update(type=kind, start_ms=_ms(start - self.started_ns), duration_ms=_ms(now - start))
        items = self.items
        if isinstance(items, tuple):
            self.items = [data]
        else:
            items.append(data)

    def model_call(
        self,
        provider: str,
        req: RequestLike,
        resp: ResponseLike | None,
        started_ns: int,
        *,
        streamed: bool = False,
        error: str | None = None,
    ) -> None:
        """Record one model call: the request's sections (with their source), tools and the answer or error."""
        self.add(
            "model",
            started_ns,
            provider=provider,
            model=(resp.model if resp is not None and resp.model else req.model) or "",
            streamed=streamed,
            system_prompt=_sections(req.system_prompt),  # see `_rendered`
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

    def tool_call(
        self, name: str, owner: str | None, arguments: Any, started_ns: int, *, result: str, is_error: bool
    ) -> None:
        """Record one tool call: its arguments and its result (or the error the model was shown)."""
        self.add(
            "tool", started_ns, name=name, plugin_id=owner, arguments=arguments, result=_cut(result), is_error=is_error
        )

    def tag(
        self,
        name: str,
        owner: str | None,
        value: str,
        attrs: dict[str, Any],
        started_ns: int,
        *,
        elements: Iterable[Any] = (),
        error: str | None = None,
    ) -> None:
        """Record one tag occurrence handled in the model's output."""
        self.add(
            "tag",
            started_ns,
            name=name,
            plugin_id=owner,
            value=_cut(value, 500),
            attrs=attrs,
            elements=[e.repr_text() for e in elements],
            error=error,
        )

    def sent(self, chain: MessageChain, ok: bool, message_id: str = "", error: str | None = None) -> None:
        """Record one message sent to the platform."""
        self.add(
            "send",
            text=_cut(chain.message_repr),
            elements=[type(e).__name__ for e in chain],
            ok=ok,
            message_id=message_id,
            error=error,
        )

    def history(self, messages: int, started_ns: int | None = None) -> None:
        """Record what the turn stored in history (`messages` chat messages)."""
        self.add("history", started_ns, messages=messages)

    def log(self, level: str, logger: str, message: str) -> None:
        """Record one log line written while this trace was current."""
        if len(self.logs) < MAX_LOGS:
            line = {"t_ms": self.ms(), "level": level, "logger": logger, "message": _cut(message, 2000)}
            logs = self.logs
            if isinstance(logs, tuple):
                self.logs = [line]
            else:
                logs.append(line)
        else:
            self.dropped += 1

    # -- reading --------------------------------------------------------------------------------------------------

    def hook_calls(self) -> list[HookCall]:
        """Every hook call of the trace (its messages' first), in the order they ran."""
        calls = [c for m in self.messages for c in m.hook_calls()]
        return calls + [c for span in self.spans for c in span.hooks()]

    def timeline(self) -> list[dict[str, Any]]:
        """Dispatches and the other items, as JSON data sorted by start."""
        items = [span.to_dict() for span in self.spans] + [_rendered(i) for i in self.items]
        items.sort(key=lambda item: item["start_ms"])
        return items

    def to_dict(self) -> dict[str, Any]:
        """The whole trace as JSON data (computed once the trace is finished, then kept)."""
        if self._dict is not None:
            return self._dict
        out = self._data([m.to_dict() for m in self.messages], self.timeline())
        if self.finished:
            self._dict = out
        return out

    def compact(self, table: HookTable, extras: list[Any]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        """The trace as plain data for the JSON-lines writer (`render_compact` renders it): `(texts, numbers)`, its
        strings and items apart from its dispatches (by their chain's number in `table` and their raw readings, see
        `compact_record`), which `marshal` packs best in different ways; what the notes of the dispatches are made of
        put in `extras`. Only what needs the live objects is done here, on the event loop; nothing is kept on the
        trace."""
        ended = self.ended_ns
        messages = [m.compact(table, extras) for m in self.messages]
        texts = (
            self.id,
            self.kind,
            self.name,
            self.sid,
            self.started_unix_ns // 1000,
            self.outcome,
            self.error,
            self.items,
            self.logs,
            self.dropped,
            [m[0] for m in messages],
        )
        # Most dispatches: every hook returned, through a chain numbered before. Written out (a call per dispatch
        # cost as much as the rest); `compact_record` has the others.
        known = table.known
        records: list[Any] = []
        for record in self.records:
            chain = record[0]
            if record[1] is None and len(record) - READINGS - 1 == len(chain):
                seen = known.get(id(chain))
                if seen is not None and seen[0] is chain and chain:
                    records.append((seen[1], record[READINGS:]))
                    continue
            records.append(compact_record(self, record, table, extras))
        return texts, (self.started_ns, ended if ended is not None else _now(), records, [m[1] for m in messages])

    def _data(self, messages: list[dict[str, Any]], timeline: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            **self.summary(),
            "error": self.error,
            "messages": messages,
            "timeline": timeline,
            "logs": list(self.logs),
            "dropped": self.dropped,
        }

    def summary(self) -> dict[str, Any]:
        """A line's worth: id, kind, name, session, start, duration, outcome."""
        end = self.ended_ns if self.ended_ns is not None else _now()
        return {
            "id": self.id,
            "kind": self.kind,
            "name": self.name,
            "sid": self.sid,
            "started_at": self.started_at.isoformat(),
            "duration_ms": round((end - self.started_ns) / 1e6, 3),
            "outcome": self.outcome,
        }

    def __repr__(self) -> str:
        return f"Trace({self.id!r}, {self.kind}, {self.name!r}, {self.outcome})"
