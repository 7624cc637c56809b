"""The decorators plugin authors use: `@on.<event>()` hooks, `@register.tool` and `@register.tag`.

Hooks are marked through pluggy (so the pluggy plugin manager finds them) and carry their priority and deadline
on the function; tools and tags carry their declaration, which the plugin manager turns into registrations.
"""

from __future__ import annotations

import collections.abc
import difflib
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import pluggy

from core.chat import MessageChains
from core.plugin._events import EventType, custom_event_name
from core.services import LLM_TOOL_ATTR, LlmToolMeta
from core.tag import validate_tag_name
from core.utils.tool_utils import validate_tool_rules

if TYPE_CHECKING:
    from core.plugin._web import PageMenu

__all__ = [
    "PROJECT",
    "hookimpl",
    "HookDecorator",
    "HookMeta",
    "TagMeta",
    "on",
    "register",
    "register_tool",
    "HOOK_ATTR",
    "TAG_ATTR",
]

PROJECT = "hookchat"
hookimpl = pluggy.HookimplMarker(PROJECT)

HOOK_ATTR = "__hookchat_hook__"
TAG_ATTR = "__hookchat_tag__"

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class HookMeta:
    """What `@on.<event>()` recorded on a hook: the event, its priority and its deadline (None: the default)."""

    event: str
    priority: int
    deadline: float | None
    #: `after_xml_parse` only: the hook takes the whole step's `MessageChains` at once (KiraAI's form).
    whole_output: bool = False


@dataclass(frozen=True, slots=True)
class TagMeta:
    """What `@register.tag` recorded on a method."""

    name: str
    description: str
    root: bool = False


def _hook(event: str, priority: int, deadline: float | None) -> Callable[[F], F]:
    if not isinstance(priority, int):
        raise TypeError(f"hook priority must be an int (or a Priority), not {priority!r}")
    if deadline is not None and not deadline > 0:
        raise ValueError(f"hook deadline must be a positive number of seconds, not {deadline!r}")

    def decorate(fn: F) -> F:
        whole = False
        if event == EventType.AFTER_XML_PARSE.value:
            whole = _takes_whole_output(fn)
            if not whole and inspect.iscoroutinefunction(fn):
                fn = _per_chain(fn)  # type: ignore[assignment] - the adapter takes the hook's place, with another signature
        elif event == EventType.MESSAGE_SENT.value and _takes_chain_and_result(fn) and inspect.iscoroutinefunction(fn):
            fn = _with_chain(fn)  # type: ignore[assignment] - the adapter takes the hook's place, with another signature
        setattr(fn, HOOK_ATTR, HookMeta(event, int(priority), deadline, whole))
        return hookimpl(specname=event)(fn)

    return decorate


def _takes_whole_output(fn: Callable[..., Any]) -> bool:
    """Whether an `after_xml_parse` hook is written for KiraAI's runtime (a list of chains, one per `<msg>`) rather
    than seed 003's `(event, chain: MessageChain)`. Its third parameter decides: annotated `list[...]` (or any
    sequence) means the list, `MessageChain` the chain; without annotation a plural name (`chains`, `actions`,
    `chain_list`) means the list, and so does taking it only through `*args`, as KiraAI's handlers do."""
    params = list(inspect.signature(fn).parameters.values())
    if len(params) < 3 or params[2].kind is inspect.Parameter.VAR_POSITIONAL:
        return True
    third = params[2]
    if third.kind is inspect.Parameter.VAR_KEYWORD:
        return True
    annotation = third.annotation
    if annotation is not inspect.Parameter.empty:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        origin = typing.get_origin(annotation)
        if origin is not None and isinstance(origin, type) and issubclass(origin, collections.abc.Sequence):
            return True
        text = str(text).replace(" ", "").lower()
        return text.startswith(("list", "typing.list", "sequence", "messagechains")) or "list[" in text
    name = third.name.lower()
    return name not in ("chain", "message_chain", "msg_chain", "message") and (name.endswith("s") or "list" in name)


def _per_chain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt a seed-003 `after_xml_parse` hook to the dispatch, which passes the step's `MessageChains`: call it
    once per chain, in order, until a hook stops the event. Called directly with one chain, it passes it on."""

    @functools.wraps(fn)
    async def each_chain(self: Any, event: Any, chains: Any = None, *args: Any, **kwargs: Any) -> None:
        if not isinstance(chains, MessageChains):
            await fn(self, event, chains, *args, **kwargs)
            return
        for chain in list(chains):
            if event.is_stopped:
                return
            await fn(self, event, chain, *args, **kwargs)

    return each_chain


_CHAIN_NAMES = ("chain", "message_chain", "msg_chain", "message", "action", "msg")


def _takes_chain_and_result(fn: Callable[..., Any]) -> bool:
    """Whether a `message_sent` hook is written for KiraAI's runtime, `(event, chain, result)`, rather than
    hookchat's `(event, result)`. The parameter after `event` decides: annotated `MessageChain` or named like a
    chain (`chain`, `message_chain`, `action`...) means KiraAI's form; annotated `KiraIMSentResult` or named
    otherwise with no second parameter after it, hookchat's; two named parameters after `event`, KiraAI's. A hook
    that takes them only through `*args` gets hookchat's `(event, result)`."""
    params = [
        p
        for p in list(inspect.signature(fn).parameters.values())[2:]
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    if not params:
        return False
    annotation = params[0].annotation
    if annotation is not inspect.Parameter.empty:
        text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", str(annotation))
        text = str(text).rsplit(".", 1)[-1]
        if text == "MessageChain":
            return True
        if text == "KiraIMSentResult":
            return False
    if params[0].name.lower() in _CHAIN_NAMES:
        return True
    return len(params) >= 2 and params[0].name.lower() not in ("result", "sent", "res", "receipt", "sent_result")


def _with_chain(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt a KiraAI-form `message_sent` hook, `(event, chain, result)`, to the dispatch's `(event, result)`."""

    @functools.wraps(fn)
    async def chain_and_result(self: Any, event: Any, result: Any = None, *args: Any, **kwargs: Any) -> None:
        await fn(self, event, result.chain, result, *args, **kwargs)

    # What the dispatch calls is this adapter, so the load-time signature check reads its signature, not fn's.
    chain_and_result.__signature__ = inspect.signature(lambda self, event, result, *args, **kwargs: None)  # type: ignore[attr-defined] - inspect reads __signature__; functions do not declare it
    return chain_and_result


class HookDecorator(Protocol):
    """`on.<event>`: called with `priority` and `deadline`, it gives the decorator that marks a hook."""

    def __call__(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """The decorator marking an `async def` method as a hook of this event."""
        ...


class _On:
    """`on.<event>(priority=Priority.MEDIUM, deadline=None)`: mark an `async def` method as a hook for that event.

    There is one such method per row of `EventType` (made below, from the table), plus `custom_event`. Higher
    priority runs first; `deadline` (seconds) overrides the engine's default hook deadline.
    """

    # Declared for type checkers and editors (completion, and a misspelt `on.im_mesage` flagged before it runs); the
    # methods themselves are made from the table below. tests/plugin/test_events.py keeps the two lists equal.
    im_message: HookDecorator
    message_buffered: HookDecorator
    im_batch_message: HookDecorator
    llm_request: HookDecorator
    llm_response: HookDecorator
    after_xml_parse: HookDecorator
    tool_result: HookDecorator
    step_result: HookDecorator
    final_result: HookDecorator
    message_sent: HookDecorator
    loaded: HookDecorator
    shutdown: HookDecorator
    exception: HookDecorator

    if not TYPE_CHECKING:  # at run time only: to a type checker an undeclared name stays an error

        def __getattr__(self, name: str) -> HookDecorator:
            """A misspelt event (`@on.im_mesage()`) fails at import with the events there are and the nearest one."""
            if name.startswith("__"):
                raise AttributeError(name)
            events = [e.value for e in EventType if e is not EventType.CUSTOM_EVENT]
            near = difflib.get_close_matches(name, events, n=1)
            hint = f"did you mean on.{near[0]}? " if near else ""
            raise AttributeError(f"there is no hook event on.{name}: {hint}(events: {', '.join(events)})")

    def custom_event(self, event_name: str, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """A custom event dispatched with `ctx.dispatch_custom(event_name, data)`: `(event: KiraCustomEvent)`."""
        if not event_name or not isinstance(event_name, str):
            raise ValueError("custom_event needs a non-empty event_name")
        return _hook(custom_event_name(event_name), priority, deadline)


def _decorator_for(event: EventType) -> Callable[..., Callable[[F], F]]:
    """The `on.<event>` method of one row of `EventType`, its docstring read off the row."""

    def decorator(self: _On, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        return _hook(event.value, priority, deadline)

    decorator.__name__ = event.value
    decorator.__qualname__ = f"_On.{event.value}"
    decorator.__doc__ = f"{event.when[:1].upper()}{event.when[1:]}: `{event.signature}`."
    return decorator


for _name, _row in EventType.__members__.items():
    if _row is not EventType.CUSTOM_EVENT:
        setattr(_On, _row.value, _decorator_for(_row))

#: The hook decorators: `@on.im_message()`, `@on.llm_request(priority=Priority.HIGH)`, ...
on = _On()


class _Register:
    """`@register.tool(...)` and `@register.tag(...)`: declare a plugin method as a model tool or an output tag;
    `@register.page/api/ws/static/widget(...)`: KiraAI's web declarations, recorded for the web console."""

    def tool(
        self,
        name: str,
        description: str,
        params: dict[str, Any] | None = None,
        *,
        timeout: float = 30.0,
        role: str | None = None,
    ) -> Callable[[F], F]:
        """Declare `async def method(self, event, *_, **params)` as a tool the model can call.

        `params` is the JSON Schema of the arguments (OpenAI tool format); arguments are validated against it
        before the call. `timeout` is at most 300 s; `role` scopes the tool to one persona (None: all).
        """
        schema = params if params is not None else {"type": "object", "properties": {}, "required": []}
        validate_tool_rules(name, timeout, schema)

        def decorate(fn: F) -> F:
            _require_async(fn, "@register.tool")
            setattr(fn, LLM_TOOL_ATTR, LlmToolMeta(name, description, schema, timeout, role, pass_event=True))
            return fn

        return decorate

    def tag(self, name: str, description: str, parent: str | None = "msg") -> Callable[[F], F]:
        """Declare `async def method(self, value, **attrs) -> list[BaseMessageElement]` as an output tag handler.

        `parent=None` (KiraAI's way) makes a root tag, which may also stand alone outside `<msg>`.
        """
        validate_tag_name(name)

        def decorate(fn: F) -> F:
            _require_async(fn, "@register.tag")
            setattr(fn, TAG_ATTR, TagMeta(name, description, root=parent is None))
            return fn

        return decorate

    # -- KiraAI's web declarations: recorded on the method for the web console (see core.plugin._web) ----------

    def page(self, route: str, auth: bool = True, menu: PageMenu | dict[str, Any] | None = None) -> Callable[[F], F]:
        """Declare a web console page at `/page/plugin/<plugin_id><route>`; the method returns a `PluginPage`."""
        return _declare_web("page", route, auth, menu=menu)

    def api(self, method: str, path: str, auth: bool = True, **kwargs: Any) -> Callable[[F], F]:
        """Declare an HTTP endpoint at `/api/plugin/<plugin_id><path>`; `kwargs` go to the route as in FastAPI."""
        return _declare_web("api", path, auth, method=method, route_options=kwargs)

    def ws(self, path: str, auth: bool = True) -> Callable[[F], F]:
        """Declare a WebSocket endpoint at `/ws/plugin/<plugin_id><path>`."""
        return _declare_web("ws", path, auth)

    def static(self, path: str, directory: str, html: bool = False) -> Callable[[F], F]:
        """Declare a static directory (relative to the plugin's folder) at `/page/plugin/<plugin_id><path>`."""
        return _declare_web("static", path, False, directory=directory, html=html)

    def widget(
        self, label: str | dict[str, str], icon: str = "Box", color: str = "blue", order: int = 100, size: str = "small"
    ) -> Callable[[F], F]:
        """Declare an overview widget; the (sync) method returns its text or, for `size="wide"`, HTML."""
        return _declare_web("widget", "", False, label=label, icon=icon, color=color, order=order, size=size)


def _declare_web(kind: str, path: str, auth: bool, **options: Any) -> Callable[[F], F]:
    # KiraAI's web declarations are imported by the first plugin that makes one: their module is 0.7% of a
    # `hookchat plugins`, whose plugins make none (docs/performance.md).
    from core.plugin._web import declare_web

    return declare_web(kind, path, auth, **options)


def _require_async(fn: Callable[..., Any], what: str) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"{what} needs an 'async def' function; {fn.__qualname__} is not async")


#: Tool and tag declarations: `@register.tool(name, description, params)`, `@register.tag(name, description)`.
register = _Register()

#: Alias of `register.tool`, for plugins written as `@register_tool(...)`.
register_tool = register.tool
