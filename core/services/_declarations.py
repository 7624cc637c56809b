"""Declarations on plugin methods that the services act on: `@llm_tool`, `@plugin_entry`, `@timer_interval`,
`@lifecycle` and the entry hooks. Each decorator only records metadata on the function; `bind_plugin` reads it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from core.services._tools import check_role
from core.utils.declarations import declared
from core.utils.tool_utils import EMPTY_PARAMETERS, validate_tool_rules

__all__ = [
    "LLM_TOOL_ATTR",
    "ENTRY_ATTR",
    "TIMER_ATTR",
    "LIFECYCLE_ATTR",
    "ENTRY_HOOK_ATTR",
    "LlmToolMeta",
    "EntryMeta",
    "TimerMeta",
    "LifecycleMeta",
    "EntryHookMeta",
    "LIFECYCLE_IDS",
    "ENTRY_HOOK_TIMINGS",
    "llm_tool",
    "plugin_entry",
    "timer_interval",
    "lifecycle",
    "entry_hook",
    "declared",
    "declared_entries",
]

LLM_TOOL_ATTR = "__hookchat_llm_tool__"
ENTRY_ATTR = "__hookchat_entry__"
TIMER_ATTR = "__hookchat_timer__"
LIFECYCLE_ATTR = "__hookchat_lifecycle__"
ENTRY_HOOK_ATTR = "__hookchat_entry_hook__"

LIFECYCLE_IDS = ("startup", "shutdown", "reload", "freeze", "unfreeze", "config_change")
ENTRY_HOOK_TIMINGS = ("before", "after", "around", "replace")

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class LlmToolMeta:
    """The one declaration of a plugin method as a model tool, recorded by `@llm_tool` and `@register.tool` alike:
    the model-visible name, description, JSON Schema, timeout and role. `pass_event` says how the method is called:
    `method(event, **arguments)` (`@register.tool`) or `method(**arguments)` (`@llm_tool`)."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=lambda: dict(EMPTY_PARAMETERS))
    timeout: float = 30.0
    role: str | None = None
    pass_event: bool = False


@dataclass(frozen=True, slots=True)
class EntryMeta:
    """The one declaration of an entry other plugins call with `plugins.call_entry("<plugin>:<id>")`, made by
    `@plugin_entry` or `register_dynamic_entry`. `make` builds it from either's keywords, checking the schema."""

    id: str
    name: str | None = None
    description: str = ""
    input_schema: dict[str, Any] | None = None
    kind: str = "action"
    timeout: float | None = None
    llm_result_fields: list[str] | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def make(
        cls,
        entry_id: str,
        *,
        llm_result_fields: list[str] | None = None,
        metadata: dict[str, Any] | None = None,
        **fields: Any,
    ) -> EntryMeta:
        """A declaration with copies of the mutable keywords; an invalid `input_schema` raises `SchemaError`."""
        if fields.get("input_schema") is not None:
            from jsonschema import Draft202012Validator  # only for an entry with a schema (start-up time)

            Draft202012Validator.check_schema(fields["input_schema"])
        return cls(
            entry_id,
            llm_result_fields=list(llm_result_fields) if llm_result_fields else None,
            metadata=dict(metadata or {}),
            **fields,
        )


@dataclass(frozen=True, slots=True)
class TimerMeta:
    """What `@timer_interval` recorded: run the method every `seconds` while the plugin runs."""

    id: str
    seconds: float
    name: str | None = None
    description: str = ""
    auto_start: bool = True
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LifecycleMeta:
    """What `@lifecycle` recorded: the lifecycle step (`startup`, `shutdown`, `config_change`, ...)."""

    id: str
    name: str | None = None
    description: str = ""


@dataclass(frozen=True, slots=True)
class EntryHookMeta:
    """What an entry hook recorded: which entries (`target`, `*` for all), when, and its priority (higher first)."""

    target: str
    timing: str
    priority: int = 0


def _ensure_callable(fn: Any, what: str) -> None:
    if not callable(fn):
        raise TypeError(f"{what} decorates a function, not {fn!r}")


def llm_tool(
    *,
    name: str | None = None,
    description: str = "",
    parameters: dict[str, Any] | None = None,
    timeout: float = 30.0,
    role: str | None = None,
) -> Callable[[F], F]:
    """Declare a method as a tool the model can call, with its parsed arguments as keyword arguments.

    `name` defaults to the method name and must match `[A-Za-z0-9_.\\-]{1,64}`; `timeout` is at most 300 s; `role`
    None makes it global, a role name (1 to 64 characters) shows it only to that persona. The rules are checked
    here, so a bad declaration fails when the class is defined. Return any JSON-serialisable value, a `ToolResult`,
    or `{"output": ..., "is_error": True, "error": "..."}` to report a tool-level error.
    """
    schema = parameters if parameters is not None else dict(EMPTY_PARAMETERS)

    def decorate(fn: F) -> F:
        _ensure_callable(fn, "@llm_tool")
        tool_name = name if name is not None else fn.__name__
        validate_tool_rules(tool_name, timeout, schema, where=f"@llm_tool on {fn.__qualname__}")
        check_role(role, tool_name, f"@llm_tool on {fn.__qualname__}")
        setattr(fn, LLM_TOOL_ATTR, LlmToolMeta(tool_name, description, schema, float(timeout), role))
        return fn

    return decorate


def plugin_entry(
    *,
    id: str | None = None,
    name: str | None = None,
    description: str = "",
    input_schema: dict[str, Any] | None = None,
    kind: str = "action",
    timeout: float | None = None,
    llm_result_fields: list[str] | None = None,
    metadata: dict[str, Any] | None = None,
    **_ignored: Any,
) -> Callable[[F], F]:
    """Declare a method as an entry point other plugins call: `await self.plugins.call_entry("pid:id", {...})`.

    The method receives the call's arguments as keyword arguments (validated against `input_schema` when given)
    and returns a value (wrapped in `Ok`) or an `Ok`/`Err`. Keywords of the original SDK that have no meaning here
    (`params`, `persist`, `model_validate`, ...) are accepted and ignored.
    """

    def decorate(fn: F) -> F:
        _ensure_callable(fn, "@plugin_entry")
        setattr(
            fn,
            ENTRY_ATTR,
            EntryMeta.make(
                id or fn.__name__,
                name=name,
                description=description,
                input_schema=input_schema,
                kind=kind,
                timeout=timeout,
                llm_result_fields=llm_result_fields,
                metadata=metadata,
            ),
        )
        return fn

    return decorate


def timer_interval(
    *,
    id: str,
    seconds: float,
    name: str | None = None,
    description: str = "",
    auto_start: bool = True,
    metadata: dict[str, Any] | None = None,
) -> Callable[[F], F]:
    """Run the method every `seconds` (first run one interval after the plugin started) while the plugin runs.

    The timer is a task the plugin owns: stopping the plugin cancels it. A run that raises is logged and the
    timer goes on; runs never overlap (the next interval starts when a run ends).
    """
    if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not seconds > 0:
        raise ValueError(f"timer {id!r}: seconds must be a positive number, not {seconds!r}")

    def decorate(fn: F) -> F:
        _ensure_callable(fn, "@timer_interval")
        setattr(fn, TIMER_ATTR, TimerMeta(id, float(seconds), name, description, auto_start, dict(metadata or {})))
        return fn

    return decorate


def lifecycle(
    *,
    id: Literal["startup", "shutdown", "reload", "freeze", "unfreeze", "config_change"],
    name: str | None = None,
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> Callable[[F], F]:
    """Run the method at a lifecycle step: `startup` (when the plugin initialises; an `Err` or exception refuses
    the load), `shutdown` (when it stops), `config_change` (after its config was updated, with `config=`)."""
    if id not in LIFECYCLE_IDS:
        raise ValueError(f"lifecycle id must be one of {', '.join(LIFECYCLE_IDS)}, not {id!r}")

    def decorate(fn: F) -> F:
        _ensure_callable(fn, "@lifecycle")
        setattr(fn, LIFECYCLE_ATTR, LifecycleMeta(id, name, description))
        return fn

    return decorate


def entry_hook(*, target: str = "*", timing: str = "before", priority: int = 0, **_ignored: Any) -> Callable[[F], F]:
    """Run the method around calls of this plugin's entries (`target` id, or `*`). By `timing`:

    - `before`: `(entry_id, args) -> dict | None | Err`: new arguments, nothing, or an `Err` that ends the call;
    - `after`: `(entry_id, args, result) -> Result | None`: a replacement result, or nothing;
    - `around`: `(entry_id, args, call_next) -> Result`: `await call_next(args)` runs the rest;
    - `replace`: `(entry_id, args) -> value`: runs instead of the entry.
    """
    if timing not in ENTRY_HOOK_TIMINGS:
        raise ValueError(f"entry hook timing must be one of {', '.join(ENTRY_HOOK_TIMINGS)}, not {timing!r}")

    def decorate(fn: F) -> F:
        _ensure_callable(fn, "entry hook")
        setattr(fn, ENTRY_HOOK_ATTR, EntryHookMeta(target, timing, int(priority)))
        return fn

    return decorate


def declared_entries(instance: object) -> list[tuple[EntryMeta, Any]]:
    """`(EntryMeta, bound method)` of every `@plugin_entry` method of `instance`, in source order."""
    return [(getattr(fn, ENTRY_ATTR), getattr(instance, name)) for name, fn in declared(instance, ENTRY_ATTR)]
