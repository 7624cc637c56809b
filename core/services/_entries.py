"""Entry points a plugin offers to other plugins (`@plugin_entry` methods and dynamic entries), the entry hooks
around them, and the plugin's timers. Both are owned by the plugin and cleared when it stops.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, replace
from typing import Any

import anyio

from core.services._declarations import (
    ENTRY_HOOK_ATTR,
    TIMER_ATTR,
    EntryHookMeta,
    EntryMeta,
    TimerMeta,
    declared,
    declared_entries,
)
from core.services._host import PluginHandle
from core.services._result import Err, Ok, Result, SdkError
from core.services._tools import refuse_if_stopping
from core.utils.tasks import call_handler, must_propagate, raised_at

__all__ = ["Entry", "EntryRegistry", "TimerRunner", "call_handler", "DEFAULT_ENTRY_TIMEOUT"]

DEFAULT_ENTRY_TIMEOUT = 30.0


def _as_result(value: Any) -> Result[Any, Any]:
    return value if isinstance(value, (Ok, Err)) else Ok(value)


@dataclass
class Entry:
    """One entry point of a plugin: its declaration (`EntryMeta`, from `@plugin_entry` or `register_dynamic_entry`),
    the handler, and whether it is enabled and dynamic."""

    meta: EntryMeta
    handler: Callable[..., Any]
    enabled: bool = True
    dynamic: bool = False

    @property
    def id(self) -> str:
        """The entry id (`<plugin_id>:<id>` is how other plugins call it)."""
        return self.meta.id

    @classmethod
    def from_meta(cls, meta: EntryMeta, handler: Callable[..., Any], entry_id: str | None = None) -> Entry:
        """A static entry from its `@plugin_entry` declaration (`entry_id` overrides the declared id)."""
        return cls(meta if entry_id is None else replace(meta, id=entry_id), handler)

    def describe(self) -> dict[str, Any]:
        """The entry as a JSON-ready dict (no handler)."""
        described = asdict(self.meta)
        described.update(name=self.meta.name or self.id, enabled=self.enabled, dynamic=self.dynamic)
        return described


@dataclass
class _Hook:
    meta: EntryHookMeta
    fn: Callable[..., Any]


class EntryRegistry:
    """The entries of one plugin and the hooks around them; `call` runs one and always returns a `Result`.
    Once the plugin of `ctx` is stopping, adding an entry or hook raises `SdkError(code="plugin_stopped")`."""

    def __init__(self, plugin_id: str, logger: logging.Logger | logging.LoggerAdapter, ctx: PluginHandle) -> None:
        self.plugin_id = plugin_id
        self.logger = logger
        self.ctx = ctx
        self._entries: dict[str, Entry] = {}
        self._hooks: list[_Hook] = []
        self._collected = False

    def collect(self, instance: object) -> None:
        """Register the `@plugin_entry` methods and entry hooks of `instance` (once; later calls do nothing)."""
        if self._collected:
            return
        self._collected = True
        for meta, handler in declared_entries(instance):
            self._entries[meta.id] = Entry.from_meta(meta, handler)
        for attr, fn in declared(instance, ENTRY_HOOK_ATTR):  # declarations: collected even while stopping
            self._hooks.append(_Hook(getattr(fn, ENTRY_HOOK_ATTR), getattr(instance, attr)))
        self._hooks.sort(key=lambda h: -h.meta.priority)

    def add_hook(self, meta: EntryHookMeta, fn: Callable[..., Any]) -> None:
        """Add an entry hook (see `core.services.entry_hook`); higher priority runs first."""
        refuse_if_stopping(self.ctx, "an entry hook")
        self._hooks.append(_Hook(meta, fn))
        self._hooks.sort(key=lambda h: -h.meta.priority)

    def add_static(self, entry: Entry) -> None:
        """Add an entry declared by code other than a decorator (a mounted router); replaces one of that id."""
        refuse_if_stopping(self.ctx, f"entry {entry.id!r}")
        self._entries[entry.id] = entry

    def register_dynamic(self, meta: EntryMeta, handler: Callable[..., Any], *, enabled: bool = True) -> bool:
        """Add (or replace) the dynamic entry `meta.id`; False when the id belongs to a static entry."""
        entry_id = meta.id
        refuse_if_stopping(self.ctx, f"entry {entry_id!r}")
        if not isinstance(entry_id, str) or not entry_id:
            raise SdkError(f"entry ids are non-empty strings, not {entry_id!r}", code="invalid_argument")
        if not callable(handler):
            raise SdkError(f"entry {entry_id!r}: handler {handler!r} is not callable", code="invalid_argument")
        known = self._entries.get(entry_id)
        if known is not None and not known.dynamic:
            self.logger.warning("dynamic entry %r not registered: a static entry has that id", entry_id)
            return False
        self._entries[entry_id] = Entry(meta, handler, enabled, dynamic=True)
        return True

    def unregister_dynamic(self, entry_id: str) -> bool:
        """Remove the dynamic entry `entry_id`; False when there is none (static entries stay)."""
        entry = self._entries.get(entry_id)
        if entry is None or not entry.dynamic:
            return False
        del self._entries[entry_id]
        return True

    def remove(self, entry_id: str) -> bool:
        """Remove entry `entry_id`, static or dynamic; True when there was one."""
        return self._entries.pop(entry_id, None) is not None

    def set_enabled(self, entry_id: str, enabled: bool) -> bool:
        """Enable or disable entry `entry_id`; False when there is none."""
        entry = self._entries.get(entry_id)
        if entry is None:
            return False
        entry.enabled = enabled
        return True

    def get(self, entry_id: str) -> Entry | None:
        """The entry `entry_id`, or None."""
        return self._entries.get(entry_id)

    def list(self, include_disabled: bool = False) -> list[dict[str, Any]]:
        """Every entry as a dict, sorted by id; disabled ones only with `include_disabled`."""
        return [e.describe() for _, e in sorted(self._entries.items()) if include_disabled or e.enabled]

    def clear(self) -> None:
        """Forget every entry and hook (the plugin stopped)."""
        self._entries.clear()
        self._hooks.clear()

    async def call(
        self, entry_id: str, args: dict[str, Any] | None = None, timeout: float | None = None
    ) -> Result[Any, SdkError]:
        """Run entry `entry_id` with `args` through its hooks; a failure, timeout or refusal is an `Err`."""
        target = f"{self.plugin_id}:{entry_id}"
        entry = self._entries.get(entry_id)
        if entry is None:
            return Err(SdkError(f"plugin {self.plugin_id!r} has no entry {entry_id!r}", code="entry_not_found"))
        if not entry.enabled:
            return Err(SdkError(f"entry {target} is disabled", code="entry_disabled"))
        args = dict(args or {})
        if entry.meta.input_schema is not None:
            from jsonschema import Draft202012Validator  # only for an entry with a schema (start-up time)

            problems = sorted(Draft202012Validator(entry.meta.input_schema).iter_errors(args), key=str)
            if problems:
                where = ".".join(map(str, problems[0].absolute_path)) or "arguments"
                return Err(
                    SdkError(f"invalid arguments for {target}: {where}: {problems[0].message}", code="invalid_argument")
                )
        limit = timeout or entry.meta.timeout or DEFAULT_ENTRY_TIMEOUT
        try:
            with anyio.fail_after(limit):
                return await self._run(entry, args)
        except TimeoutError:
            return Err(SdkError(f"entry {target} did not finish within {limit:g} s", code="timeout"))
        except BaseException as exc:
            if must_propagate(exc):
                raise
            self.logger.error("entry %s failed at %s", target, raised_at(exc), exc_info=exc)
            return Err(SdkError(f"entry {target} failed: {type(exc).__name__}: {exc}", code="entry_failed"))

    async def _run(self, entry: Entry, args: dict[str, Any]) -> Result[Any, Any]:
        hooks = [h for h in self._hooks if h.meta.target in ("*", entry.id)]
        for hook in (h for h in hooks if h.meta.timing == "before"):
            changed = await call_handler(hook.fn, entry.id, args)
            if isinstance(changed, Err):
                return changed
            if isinstance(changed, dict):
                args = changed
        replace = next((h for h in hooks if h.meta.timing == "replace"), None)

        async def innermost(call_args: dict[str, Any]) -> Result[Any, Any]:
            if replace is not None:
                return _as_result(await call_handler(replace.fn, entry.id, call_args))
            return _as_result(await call_handler(entry.handler, **call_args))

        chain: Callable[[dict[str, Any]], Awaitable[Result[Any, Any]]] = innermost
        for hook in reversed([h for h in hooks if h.meta.timing == "around"]):
            chain = _wrap(hook.fn, entry.id, chain)
        result = await chain(args)
        for hook in (h for h in hooks if h.meta.timing == "after"):
            changed = await call_handler(hook.fn, entry.id, args, result)
            if isinstance(changed, (Ok, Err)):
                result = changed
        return result


def _wrap(fn: Callable[..., Any], entry_id: str, call_next: Callable[[dict[str, Any]], Awaitable[Result[Any, Any]]]):
    async def around(call_args: dict[str, Any]) -> Result[Any, Any]:
        return _as_result(await call_handler(fn, entry_id, call_args, call_next))

    return around


class TimerRunner:
    """The `@timer_interval` timers of one plugin, each a task the plugin owns (`ctx.spawn`). Once the plugin is
    stopping, adding or starting a timer raises `SdkError(code="plugin_stopped")`."""

    def __init__(self, ctx: PluginHandle, logger: logging.Logger | logging.LoggerAdapter) -> None:
        self.ctx = ctx
        self.logger = logger
        self._timers: dict[str, tuple[TimerMeta, Callable[..., Any]]] = {}
        self._tasks: dict[str, asyncio.Task[Any]] = {}

    def collect(self, instance: object) -> None:
        """Register the timers of `instance` and start those with `auto_start`."""
        for attr, fn in declared(instance, TIMER_ATTR):
            meta: TimerMeta = getattr(fn, TIMER_ATTR)
            self.add(meta, getattr(instance, attr))

    def add(self, meta: TimerMeta, handler: Callable[..., Any]) -> None:
        """Register a timer (replacing one of that id) and start it when `meta.auto_start`."""
        refuse_if_stopping(self.ctx, f"timer {meta.id!r}")
        self.stop(meta.id)
        self._timers[meta.id] = (meta, handler)
        if meta.auto_start:
            self.start(meta.id)

    def start(self, timer_id: str) -> bool:
        """Start timer `timer_id`; False when it is unknown or already running."""
        refuse_if_stopping(self.ctx, f"timer {timer_id!r}")
        known = self._timers.get(timer_id)
        task = self._tasks.get(timer_id)
        if known is None or (task is not None and not task.done()):
            return False
        meta, handler = known
        self._tasks[timer_id] = self.ctx.spawn(self._run(meta, handler), name=f"timer:{timer_id}")
        return True

    def stop(self, timer_id: str) -> bool:
        """Stop timer `timer_id`; False when it was not running."""
        task = self._tasks.pop(timer_id, None)
        if task is None or task.done():
            return False
        task.cancel()
        return True

    def list(self) -> list[dict[str, Any]]:
        """Every timer: id, name, seconds, running."""
        out = []
        for timer_id, (meta, _) in sorted(self._timers.items()):
            task = self._tasks.get(timer_id)
            out.append(
                {
                    "id": timer_id,
                    "name": meta.name or timer_id,
                    "seconds": meta.seconds,
                    "running": task is not None and not task.done(),
                }
            )
        return out

    @property
    def tasks(self) -> list[asyncio.Task[Any]]:
        """The timer tasks started so far (done ones included)."""
        return list(self._tasks.values())

    def clear(self) -> None:
        """Stop every timer and forget them (the plugin stopped)."""
        for timer_id in list(self._tasks):
            self.stop(timer_id)
        self._timers.clear()

    async def _run(self, meta: TimerMeta, handler: Callable[..., Any]) -> None:
        while True:
            await asyncio.sleep(meta.seconds)
            try:
                await call_handler(handler)
            except SdkError as exc:
                if exc.code == "plugin_stopped":  # the plugin is stopping: this timer is about to be cancelled
                    return
                self.logger.exception("timer %r failed; it keeps running", meta.id)
            except Exception:
                self.logger.exception("timer %r failed; it keeps running", meta.id)
            except BaseException as exc:  # SystemExit, KeyboardInterrupt, ... of the handler: its failure
                if must_propagate(exc):
                    raise
                self.logger.error(
                    "timer %r raised %s at %s; it keeps running",
                    meta.id,
                    type(exc).__name__,
                    raised_at(exc),
                    exc_info=exc,
                )
