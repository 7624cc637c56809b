"""The hook engine: pluggy is the registry, the async call loop is ours.

Hooks of an event run one after another in descending priority; ties run in plugin load order (plugins load
sorted by plugin id), then in source order within a plugin. The sorted chain per event is cached and rebuilt only
when plugins are registered or unregistered; a dispatch keeps the chain it started with. A hook that raises or
passes its deadline is logged with its plugin id, hook name and file:line, reported to `exception` hooks, and the
chain goes on; that holds for `SystemExit` and every other `BaseException` of plugin code too (only a requested
cancellation and a real Ctrl-C propagate). A hook that swallows its cancellation is abandoned (`hook_stuck`). Deadlines cost no cancel scope per hook: one watchdog task cancels a dispatch whose hook has not moved
for its deadline, and a watchdog thread reports event-loop stalls with the plugin and hook that was running.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import math
import sys
import threading
import time
import traceback
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pluggy

from core.chat import KiraExceptionEvent
from core.plugin._decorators import HOOK_ATTR, PROJECT, HookMeta
from core.plugin._events import EventType, check_event_name, event_arguments, pipeline_order
from core.trace import Tracer, clock
from core.utils.declarations import declared
from core.utils.log import logger
from core.utils.signals import hook_failed, hook_stuck, loop_stalled, send
from core.utils.tasks import must_propagate, raised_at

__all__ = ["HookEngine", "HookEntry", "HookRegistrationError", "HookTimeout"]

_EXCEPTION = EventType.EXCEPTION.value
if sys.version_info >= (3, 12):
    _current_task = asyncio.current_task
else:  # Python code on 3.11 that reads the C tasks' table: read the table without the call (2% of a dispatch)
    import _asyncio

    _current_task = _asyncio._current_tasks.get  # pyright: ignore[reportAttributeAccessIssue] - 3.11's, not in the stub
_IMPL_ATTR = PROJECT + "_impl"  # where pluggy's HookimplMarker stores its options on a function


_marked: weakref.WeakKeyDictionary[type, frozenset[str]] = weakref.WeakKeyDictionary()


def _marked_names(cls: type) -> frozenset[str]:
    names = _marked.get(cls)
    if names is None:
        names = _marked[cls] = frozenset(name for name, _ in declared(cls, _IMPL_ATTR))
    return names


def _source_of(fn: Callable[..., Any]) -> str:
    code = getattr(inspect.unwrap(fn), "__code__", None)  # the plugin's function, not an adapter around it
    return f"{code.co_filename}:{code.co_firstlineno}" if code else "?"


def _file_of(fn: Callable[..., Any]) -> str | None:
    code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)
    return code.co_filename if code else None


def _check_signature(where: str, method: Callable[..., Any], event: str) -> None:
    """Refuse a hook that cannot be called with its event's positional arguments, naming the signature it needs."""
    arguments = event_arguments(event)
    try:
        inspect.signature(method).bind(*arguments)
    except TypeError:
        needed = ", ".join(("self", *arguments, "*args", "**kwargs"))
        raise HookRegistrationError(
            f"{where} cannot take the arguments of {event}: it is called as {event}({', '.join(arguments)}); "
            f"write it as 'async def {getattr(method, '__name__', 'hook')}({needed})'"
        ) from None
    except ValueError:  # no signature to read (a C callable): it will show at the first call
        return


class HookRegistrationError(TypeError):
    """A hook cannot be registered (for example it is not `async def`); the message names plugin and function."""


class HookTimeout(TimeoutError):
    """A hook ran past its deadline and was cancelled."""


@dataclass(frozen=True, slots=True)
class HookEntry:
    """One hook in a resolved chain: what runs, for which plugin, at which priority and deadline."""

    fn: Callable[..., Any]
    plugin_id: str
    hook_name: str
    event: str
    priority: int
    deadline: float

    def describe(self) -> dict[str, Any]:
        """The entry as introspection data: plugin, function, priority, deadline."""
        return {
            "plugin_id": self.plugin_id,
            "function": self.hook_name,
            "priority": self.priority,
            "deadline": self.deadline,
        }


class _Dispatch:
    """The watchdog's view of one task's dispatching: the hook running now (None between dispatches), a `seq`
    that moves with every dispatch, the hook the watchdog expired, and expired hooks that swallowed their
    cancellation (reported when the dispatch ends). One per task, kept in a context variable."""

    __slots__ = ("task", "entry", "seq", "seen", "seen_at", "expired", "swallowed", "stuck", "__weakref__")

    def __init__(self, task: asyncio.Task[Any] | None) -> None:
        self.task = task
        self.entry: HookEntry | None = None
        self.seq = 0  # moves once per dispatch, so the same entry in two dispatches counts as progress
        self.seen: tuple[HookEntry | None, int] | None = None
        self.seen_at = 0.0
        self.expired: HookEntry | None = None
        self.swallowed: list[HookEntry] = []
        self.stuck: HookEntry | None = None  # the expired hook still runs a deadline later: reported once


class HookEngine(pluggy.PluginManager):
    """The pluggy plugin manager of hookchat, with a cached priority-ordered async dispatch.

    `default_deadline` (seconds) bounds every hook that sets no deadline of its own; `stall_threshold` (seconds)
    is how long the event loop may be blocked before the stall watchdog reports it.
    """

    def __init__(
        self, *, default_deadline: float = 10.0, stall_threshold: float = 0.1, tracer: Tracer | None = None
    ) -> None:
        super().__init__(PROJECT)
        #: Records each dispatch into the current trace when `tracer.enabled` (off: one attribute check).
        self.tracer = tracer if tracer is not None else Tracer(enabled=False)
        self.default_deadline = default_deadline
        self.stall_threshold = stall_threshold
        self._chains: dict[str, tuple[HookEntry, ...]] = {}
        self._load_order: dict[str, int] = {}
        self._next_order = 0
        self._records: weakref.WeakSet[_Dispatch] = weakref.WeakSet()
        self._record_var: contextvars.ContextVar[_Dispatch] = contextvars.ContextVar("hookchat_dispatch")
        self._watchdog: asyncio.Task[None] | None = None
        self._watchdog_loop: asyncio.AbstractEventLoop | None = None
        self._stall_thread: threading.Thread | None = None
        self._stop_thread = threading.Event()
        self._beat = time.monotonic()
        self._min_deadline = math.inf  # the shortest deadline of any hook resolved: how often the records are walked
        #: Plugins whose hook ignored its cancellation at its deadline, with why: their hooks no longer run.
        self.faulty: dict[str, str] = {}

    # -- registration -------------------------------------------------------------------------------------------

    def register(self, plugin: object, name: str | None = None) -> str | None:
        """Register `plugin` under `name` (its plugin id); every `@on` hook on it must be `async def`."""
        label = name or self.get_canonical_name(plugin)
        for attr, fn in declared(plugin, _IMPL_ATTR):
            where = f"hook {type(plugin).__name__}.{attr} of plugin {label!r} ({_source_of(fn)})"
            if not inspect.iscoroutinefunction(fn):
                raise HookRegistrationError(
                    f"{where} is not async: declare it with 'async def' (hooks run on the event loop)"
                )
            meta: HookMeta | None = getattr(fn, HOOK_ATTR, None)
            if meta is not None:
                _check_signature(where, getattr(plugin, attr), meta.event)
        registered = super().register(plugin, name)
        self.faulty.pop(label, None)  # registered afresh (a reload): its hooks run again
        if registered is not None and registered not in self._load_order:
            self._load_order[registered] = self._next_order
            self._next_order += 1
        self._chains = {}
        return registered

    def parse_hookimpl_opts(self, plugin: object, name: str) -> Any:
        """pluggy's discovery, asked only for the methods that carry our marker (found once per class)."""
        if not isinstance(plugin, types.ModuleType) and name not in _marked_names(type(plugin)):
            return None
        return super().parse_hookimpl_opts(plugin, name)

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any:
        """Unregister a plugin and all its hooks; dispatches already running keep the chain they started with."""
        out = super().unregister(plugin, name)
        self._chains = {}
        return out

    def set_load_order(self, plugin_ids: list[str]) -> None:
        """Fix the tie-break order of equal-priority hooks to `plugin_ids` (the plugin manager passes them sorted)."""
        self._load_order = {pid: i for i, pid in enumerate(plugin_ids)}
        self._next_order = len(plugin_ids)
        self._chains = {}

    # -- chains ---------------------------------------------------------------------------------------------------

    def chain(self, event: str) -> tuple[HookEntry, ...]:
        """The resolved, ordered hooks of `event` (cached until plugins change); `UnknownEventError` for a name
        that is not an event (see `EventType`)."""
        chain = self._chains.get(event)
        if chain is None:
            chain = self._chains[event] = self._build_chain(event)
        return chain

    def events(self) -> list[str]:
        """Every event that has at least one hook, in pipeline order (custom events last)."""
        return sorted((name for name, caller in vars(self.hook).items() if caller.get_hookimpls()), key=pipeline_order)

    def _build_chain(self, event: str) -> tuple[HookEntry, ...]:
        check_event_name(event)  # a name no hook can listen to raises (UnknownEventError), so a typo shows at once
        caller = getattr(self.hook, event, None)
        if caller is None:
            return ()
        keyed = []
        for impl in caller.get_hookimpls():
            if impl.plugin_name in self.faulty:
                continue
            fn = impl.function
            meta: HookMeta | None = getattr(fn, HOOK_ATTR, None)
            priority = meta.priority if meta else 0
            deadline = meta.deadline if meta and meta.deadline else self.default_deadline
            code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)  # a wrapped hook's own line
            line = code.co_firstlineno if code else 0
            entry = HookEntry(fn, impl.plugin_name, getattr(fn, "__name__", repr(fn)), event, priority, deadline)
            self._min_deadline = min(self._min_deadline, deadline)
            keyed.append(((-priority, self._load_order.get(impl.plugin_name, math.inf), line), entry))
        keyed.sort(key=lambda item: item[0])
        return tuple(entry for _, entry in keyed)

    # -- dispatch -------------------------------------------------------------------------------------------------

    async def dispatch(self, event_name: str, event: Any, *args: Any) -> None:
        """Run the hooks of `event_name` as `hook(event, *args)` in order, until one calls `event.stop()`.

        `event_name` is a value of `EventType` (an `EventType` member is one) or `custom_event:<name>`; any other
        name raises `UnknownEventError`, since no hook could ever listen to it. A hook that raises (any
        `BaseException`: `SystemExit`, `KeyboardInterrupt`, `GeneratorExit`, a `CancelledError` nobody requested)
        or passes its deadline is reported and skipped; a cancellation from outside and a real Ctrl-C propagate
        (`core.utils.tasks.must_propagate`).
        """
        chain = self._chains.get(event_name)
        if chain is None:
            chain = self.chain(event_name)  # the cache missed: the name is checked against EventType here
        if not chain:
            return
        # The task, asked of the loop the watchdogs run on: without a loop, asyncio first finds the running one,
        # which on Python 3.11 costs a getpid() system call, more than the rest of a dispatch's own work.
        task = _current_task(self._watchdog_loop)
        record = self._record_var.get(None)
        if record is None or record.task is not task:
            task, record = self._task_record(record)
        outer = record.entry
        span = None
        # The loops below differ only in how they call a hook: a call with spread arguments costs more than the
        # hooks themselves, and a per-hook test of the arity or of tracing costs a tenth of the dispatch. The
        # watchdog reads `record.entry` to know which hook runs; a traced dispatch takes a clock reading after
        # each hook (its end, the next one's start), appended as `span.append(...)`: Python 3.11 appends that form
        # in place, where a bound `append` kept in a local is a C call (a tenth of the trace's cost per hook).
        try:
            if self.tracer.enabled:  # trace
                span = self.tracer.dispatch(event_name, event, args, chain)
                if not args:
                    for entry in chain:
                        if event.is_stopped:
                            break
                        record.entry = entry
                        try:
                            await entry.fn(event)
                        except BaseException as exc:
                            await self._failed(entry, exc, event, task, record)
                        span.append(clock())
                elif len(args) == 1:
                    (only,) = args
                    for entry in chain:
                        if event.is_stopped:
                            break
                        record.entry = entry
                        try:
                            await entry.fn(event, only)
                        except BaseException as exc:
                            await self._failed(entry, exc, event, task, record)
                        span.append(clock())
                else:
                    for entry in chain:
                        if event.is_stopped:
                            break
                        record.entry = entry
                        try:
                            await entry.fn(event, *args)
                        except BaseException as exc:
                            await self._failed(entry, exc, event, task, record)
                        span.append(clock())
            elif not args:
                for entry in chain:
                    if event.is_stopped:
                        break
                    record.entry = entry
                    try:
                        await entry.fn(event)
                    except BaseException as exc:
                        await self._failed(entry, exc, event, task, record)
            elif len(args) == 1:
                (only,) = args
                for entry in chain:
                    if event.is_stopped:
                        break
                    record.entry = entry
                    try:
                        await entry.fn(event, only)
                    except BaseException as exc:
                        await self._failed(entry, exc, event, task, record)
            else:
                for entry in chain:
                    if event.is_stopped:
                        break
                    record.entry = entry
                    try:
                        await entry.fn(event, *args)
                    except BaseException as exc:
                        await self._failed(entry, exc, event, task, record)
            last = record.entry
            if event.is_stopped and event.stopped_by is None and last is not outer and last is not None:
                # The hook that ran last stopped it (a stopped event ends the chain right after its hook).
                event.stopped_by = f"{last.plugin_id}.{last.hook_name}"
        except BaseException:
            if span is not None:  # trace: cancelled from outside (or a real Ctrl-C); free when nothing is raised
                self.tracer.abandoned(span)
            raise
        finally:
            record.entry = outer
            record.seq += 1
        if record.entry is None and (record.expired is not None or record.swallowed):
            await self._report_swallowed(record, task, event)
        if span is not None and (event.is_stopped or type(span) is not list):  # trace: a plain record needs no close
            self.tracer.dispatched(span, event)

    async def _failed(
        self, entry: HookEntry, exc: BaseException, event: Any, task: asyncio.Task[Any] | None, record: _Dispatch
    ) -> None:
        """`entry` raised `exc`: report it as the hook's failure and return, or raise it again when it must go on
        up (a cancellation of this dispatch from outside, a real Ctrl-C)."""
        if isinstance(exc, asyncio.CancelledError):
            # Only the watchdog's own cancellation is absorbed; clear its mark either way, or a stale mark would
            # disable this task's deadlines and swallow a later cancellation from outside.
            expired, record.expired = record.expired, None
            if expired is not None:
                if not self._absorb_timeout(task):
                    raise exc
                await self._report(expired, HookTimeout(f"hook passed its {expired.deadline:g} s deadline"), event)
                return
            if task is None or task.cancelling():
                raise exc  # a cancellation of this dispatch, from outside
            # else a CancelledError nobody requested: the hook raised it
        elif not isinstance(exc, Exception) and must_propagate(exc):  # a real Ctrl-C
            raise exc
        await self._report(entry, exc, event)

    async def _report_swallowed(self, record: _Dispatch, task: asyncio.Task[Any] | None, event: Any) -> None:
        """After the outermost chain: report the hooks that swallowed the watchdog's cancellation."""
        if record.expired is not None:
            # The last hook swallowed the watchdog's cancellation and returned before the watchdog noticed.
            record.swallowed.append(record.expired)
            record.expired = None
            self._absorb_timeout(task)
        while record.swallowed and record.entry is None:
            entry = record.swallowed.pop(0)
            await self._report(entry, HookTimeout(f"hook passed its {entry.deadline:g} s deadline"), event)

    def _task_record(self, record: _Dispatch | None) -> tuple[asyncio.Task[Any] | None, _Dispatch]:
        """The running task and its watchdog record, found the slow way (a first dispatch, another loop, or a child
        task that inherited its parent's record with its context)."""
        task = asyncio.current_task()
        if record is None or record.task is not task:
            record = self._new_record(task)
        return task, record

    def _new_record(self, task: asyncio.Task[Any] | None) -> _Dispatch:
        """The first dispatch of a task: give it a watchdog record (and make sure the watchdogs run on its loop)."""
        if self._watchdog_loop is not (task.get_loop() if task else None) or self._watchdog is None:
            self._start_watchdog()
        record = _Dispatch(task)
        self._record_var.set(record)
        self._records.add(record)
        return record

    @staticmethod
    def _absorb_timeout(task: asyncio.Task[Any] | None) -> bool:
        """Undo the watchdog's cancel request; False when another cancellation (from outside) is also pending."""
        if task is None:
            return False
        return task.uncancel() == 0

    async def _report(self, entry: HookEntry, error: BaseException, event: Any) -> None:
        timed_out = isinstance(error, HookTimeout)
        if self.tracer.enabled:  # trace
            self.tracer.hook_failed(entry, error, timed_out)
        tb = "".join(traceback.format_exception(error)) if not timed_out else ""
        logger.error(
            "plugin %r hook %s (%s) %s: %s%s",
            entry.plugin_id,
            entry.hook_name,
            entry.event,
            "timed out" if timed_out else f"raised at {raised_at(error, _file_of(entry.fn))}",
            error if isinstance(error, Exception) else f"{type(error).__name__}({error})",
            f"\n{tb}" if tb else "",
        )
        send(
            hook_failed,
            self,
            plugin_id=entry.plugin_id,
            hook_name=entry.hook_name,
            event_name=entry.event,
            error=error,
            timed_out=timed_out,
        )
        if entry.event == _EXCEPTION:
            return  # a failing exception hook is logged, never re-dispatched
        await self.dispatch(
            _EXCEPTION,
            KiraExceptionEvent(error, entry.plugin_id, entry.hook_name, entry.event, event, tb, timed_out),
        )

    # -- watchdogs ------------------------------------------------------------------------------------------------

    def _start_watchdog(self) -> None:
        loop = asyncio.get_running_loop()
        if self._watchdog is not None and not self._watchdog.done() and self._watchdog_loop is loop:
            return
        self._watchdog_loop = loop
        self._watchdog = loop.create_task(self._watch_deadlines(), name="hookchat-hook-watchdog")
        if self._stall_thread is None or not self._stall_thread.is_alive():
            self._stop_thread.clear()
            self._stall_thread = threading.Thread(
                target=self._watch_stalls, name="hookchat-stall-watchdog", daemon=True
            )
            self._stall_thread.start()

    def _tick(self) -> float:
        return max(0.005, min(0.1, self.default_deadline / 4, self.stall_threshold / 4))

    async def _watch_deadlines(self) -> None:
        """Cancel a dispatch whose current hook has not changed for its deadline."""
        tick = self._tick()
        walked = time.monotonic()
        while True:
            await asyncio.sleep(tick)
            now = self._beat = time.monotonic()
            # The beat moves every tick (the stall thread reads it); the records are walked only every 1/20 of the
            # shortest deadline a hook can have: a hook is still cancelled within 10% past its deadline, and
            # 10,000 sessions' records are not walked 40 times a second for 10 s deadlines.
            if now - walked < min(self._min_deadline, self.default_deadline) / 20:
                continue
            walked = now
            records = [r for r in list(self._records) if r.entry is not None]
            for record in records:
                entry = record.entry
                if record.expired is not None and record.expired is not entry:
                    # The expired hook swallowed its cancellation and returned: undo the cancel request so this
                    # task's later deadlines (and cancellations from outside) work; report it when the dispatch ends.
                    record.swallowed.append(record.expired)
                    record.expired = None
                    if record.task is not None and record.task.cancelling():
                        record.task.uncancel()
                if record.seen is None or record.seen[0] is not entry or record.seen[1] != record.seq:
                    record.seen, record.seen_at = (entry, record.seq), now
                elif (
                    entry is not None
                    and record.expired is None
                    and now - record.seen_at >= entry.deadline
                    and record.task is not None
                ):
                    record.expired = entry
                    record.task.cancel()
                elif (
                    entry is not None
                    and record.expired is entry
                    and record.stuck is not entry
                    and now - record.seen_at >= 2 * entry.deadline
                ):
                    record.stuck = entry
                    self._mark_faulty(entry, record.task)
            tick = max(0.005, min(tick, min((r.entry.deadline / 4 for r in records if r.entry), default=tick)))

    def mark_faulty(self, plugin_id: str, reason: str) -> None:
        """Stop running `plugin_id`'s hooks (dispatches already running keep their chain) and remember why."""
        self.faulty[plugin_id] = reason
        self._chains = {}

    def _mark_faulty(self, entry: HookEntry, task: asyncio.Task[Any] | None) -> None:
        """A hook swallowed the cancellation of its deadline and still runs a deadline later: say so, run its
        plugin's hooks no more, and tell the owner of the blocked task (`hook_stuck`), which abandons it: a turn
        scheduler hands the session to a new worker; the task stays blocked in the hook until it returns, and
        shutdown abandons it."""
        reason = (
            f"hook {entry.hook_name} ({entry.event}) ignored its cancellation at its {entry.deadline:g} s "
            "deadline and kept running"
        )
        logger.error(
            "plugin %r is faulty: %s; its hooks will not run again until it is reloaded", entry.plugin_id, reason
        )
        self.mark_faulty(entry.plugin_id, reason)
        send(
            hook_failed,
            self,
            plugin_id=entry.plugin_id,
            hook_name=entry.hook_name,
            event_name=entry.event,
            error=HookTimeout(reason),
            timed_out=True,
        )
        send(hook_stuck, self, plugin_id=entry.plugin_id, hook_name=entry.hook_name, event_name=entry.event, task=task)

    def _watch_stalls(self) -> None:
        """Runs in a thread: when the loop's heartbeat stops, report the hook the blocked task is running."""
        reported_beat = None
        while not self._stop_thread.wait(self.stall_threshold / 2):
            loop = self._watchdog_loop
            beat = self._beat
            stalled = time.monotonic() - beat
            if loop is None or loop.is_closed() or stalled < self.stall_threshold or reported_beat == beat:
                continue
            reported_beat = beat
            running = asyncio.current_task(loop)  # the task the blocked loop is running (a read from this thread)
            entry = next((r.entry for r in _copy(self._records) if r.task is running and r.entry), None)
            if entry is not None:
                logger.warning(
                    "event loop blocked for %.2f s while plugin %r hook %s (%s) was running: "
                    "move blocking work to a thread (anyio.to_thread.run_sync)",
                    stalled,
                    entry.plugin_id,
                    entry.hook_name,
                    entry.event,
                )
            else:
                logger.warning("event loop blocked for %.2f s outside any hook", stalled)
            send(
                loop_stalled,
                self,
                seconds=stalled,
                plugin_id=entry.plugin_id if entry else None,
                hook_name=entry.hook_name if entry else None,
            )

    async def aclose(self) -> None:
        """Stop the watchdogs (the engine restarts them on the next dispatch)."""
        self._stop_thread.set()
        watchdog, self._watchdog, self._watchdog_loop = self._watchdog, None, None
        # A task's next dispatch must start the watchdogs again: a fresh variable gives every task a new record.
        self._record_var = contextvars.ContextVar("hookchat_dispatch")
        if watchdog is not None and not watchdog.done():
            watchdog.cancel()
            try:
                await watchdog
            except (asyncio.CancelledError, RuntimeError):
                pass
        if self._stall_thread is not None:
            self._stall_thread.join(timeout=1)
            self._stall_thread = None


def _copy(records: weakref.WeakSet[_Dispatch]) -> list[_Dispatch]:
    """A list of `records` read from another thread: the loop's thread may add one while it is copied (the copy then
    raises "Set changed size during iteration"), so it is taken again."""
    while True:
        try:
            return list(records)
        except RuntimeError:
            continue
