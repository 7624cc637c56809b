"""The SDK's declaration decorators, mapped onto hookchat: entries, lifecycle steps, timers and entry hooks are the
`core.services` ones; message/event flavours are entries of another `kind`; UI-only markers record metadata only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, TypeVar

from core.services import entry_hook, lifecycle, llm_tool, plugin_entry, timer_interval
from plugin.sdk.plugin.base import NekoPluginBase, PluginMeta

__all__ = [
    "EntryKind",
    "neko_plugin",
    "plugin_entry",
    "lifecycle",
    "timer_interval",
    "message",
    "on_event",
    "custom_event",
    "hook",
    "before_entry",
    "after_entry",
    "around_entry",
    "replace_entry",
    "quick_action",
    "plugin",
    "NEKO_PLUGIN_ATTR",
    "QUICK_ACTION_ATTR",
]

F = TypeVar("F", bound=Callable[..., Any])
C = TypeVar("C", bound=type)

#: The kinds an entry may declare (informational in hookchat: every kind is called the same way).
EntryKind = Literal["service", "action", "hook", "custom", "lifecycle", "consumer", "timer", "message", "event"]

NEKO_PLUGIN_ATTR = "__neko_plugin__"
QUICK_ACTION_ATTR = "__hookchat_quick_action__"


def _is_plugin_class(cls: object) -> bool:
    return isinstance(cls, type) and issubclass(cls, NekoPluginBase)


def neko_plugin(cls: C) -> C:
    """Mark a `NekoPluginBase` subclass as a plugin (the loader finds it by its base class; this records its
    `PluginMeta` and checks the base)."""

    if not _is_plugin_class(cls):
        raise TypeError(f"@neko_plugin decorates a NekoPluginBase subclass, not {cls!r}")
    setattr(cls, NEKO_PLUGIN_ATTR, PluginMeta(id=cls.__name__, name=cls.__name__, description=(cls.__doc__ or "")))
    return cls


def message(
    *,
    id: str,
    name: str | None = None,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    source: str | None = None,
    metadata: dict[str, Any] | None = None,
) -> Callable[[F], F]:
    """An entry of kind `message` (the original host's message handlers). hookchat sends it nothing by itself;
    other plugins call it like any entry."""
    return plugin_entry(
        id=id,
        name=name,
        description=description,
        input_schema=input_schema,
        kind="message",
        metadata={**(metadata or {}), "source": source},
    )


def on_event(
    *,
    event_type: str,
    id: str | None = None,
    name: str | None = None,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    kind: str = "action",
    metadata: dict[str, Any] | None = None,
    **_ignored: Any,
) -> Callable[[F], F]:
    """An entry for an event of the original host; callable like any entry, with `event_type` in its metadata."""
    return plugin_entry(
        id=id,
        name=name,
        description=description,
        input_schema=input_schema,
        kind=kind,
        metadata={**(metadata or {}), "event_type": event_type},
    )


def custom_event(
    *,
    event_type: str,
    id: str,
    name: str | None = None,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    kind: str = "custom",
    metadata: dict[str, Any] | None = None,
    **_ignored: Any,
) -> Callable[[F], F]:
    """An entry of kind `custom` for plugin-defined events; callable like any entry."""
    return plugin_entry(
        id=id,
        name=name,
        description=description,
        input_schema=input_schema,
        kind=kind,
        metadata={**(metadata or {}), "event_type": event_type},
    )


def hook(
    *, target: str = "*", timing: str = "before", priority: int = 0, condition: str | None = None
) -> Callable[[F], F]:
    """An entry hook (`before`, `after`, `around` or `replace`); see `core.services.entry_hook`. `condition`
    is not evaluated in hookchat."""
    return entry_hook(target=target, timing=timing, priority=priority)


def before_entry(*, target: str = "*", priority: int = 0, condition: str | None = None) -> Callable[[F], F]:
    """`(self, entry_id, args)` runs before the entry; return new args, None, or an `Err` to refuse the call."""
    return entry_hook(target=target, timing="before", priority=priority)


def after_entry(*, target: str = "*", priority: int = 0, condition: str | None = None) -> Callable[[F], F]:
    """`(self, entry_id, args, result)` runs after the entry; return a replacement `Ok`/`Err`, or None."""
    return entry_hook(target=target, timing="after", priority=priority)


def around_entry(*, target: str = "*", priority: int = 0, condition: str | None = None) -> Callable[[F], F]:
    """`(self, entry_id, args, call_next)` wraps the entry; `await call_next(args)` runs it."""
    return entry_hook(target=target, timing="around", priority=priority)


def replace_entry(*, target: str = "*", priority: int = 0, condition: str | None = None) -> Callable[[F], F]:
    """`(self, entry_id, args)` runs instead of the entry."""
    return entry_hook(target=target, timing="replace", priority=priority)


def quick_action(*, icon: str | None = None, priority: int = 0) -> Callable[[F], F]:
    """Marks an entry as a quick action of the original host's UI. hookchat has no such UI: recorded, no effect."""

    def decorate(fn: F) -> F:
        setattr(fn, QUICK_ACTION_ATTR, {"icon": icon, "priority": priority})
        return fn

    return decorate


class _PluginDecorators:
    """`plugin.entry(...)`, `plugin.lifecycle(...)`, `plugin.timer(...)`, ...: the decorators as one namespace."""

    entry = staticmethod(plugin_entry)
    event = staticmethod(on_event)
    hook = staticmethod(hook)
    lifecycle = staticmethod(lifecycle)
    message = staticmethod(message)
    timer = staticmethod(timer_interval)
    custom_event = staticmethod(custom_event)
    llm_tool = staticmethod(llm_tool)


#: The decorators as one namespace: `@plugin.entry(id="x")`, `@plugin.timer(id="t", seconds=60)`.
plugin = _PluginDecorators()
