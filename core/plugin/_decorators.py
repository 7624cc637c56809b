"""The decorators plugin authors use: `@on.<event>()` hooks, `@register.tool` and `@register.tag`.

Hooks are marked through pluggy (so the pluggy plugin manager finds them) and carry their priority and deadline
on the function; tools and tags carry their declaration, which the plugin manager turns into registrations.
"""

from __future__ import annotations

import difflib
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy

from core.plugin._events import EventType, custom_event_name
from core.plugin._pages import API_ATTR, PAGE_ATTR, PageMenu, api_meta, page_meta
from core.services import LLM_TOOL_ATTR, LlmToolMeta
from core.tag import validate_tag_name
from core.utils.tool_utils import validate_tool_rules

__all__ = [
    "PROJECT",
    "hookimpl",
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


@dataclass(frozen=True, slots=True)
class TagMeta:
    """What `@register.tag` recorded on a method."""

    name: str
    description: str


def _hook(event: str, priority: int, deadline: float | None) -> Callable[[F], F]:
    if not isinstance(priority, int):
        raise TypeError(f"hook priority must be an int (or a Priority), not {priority!r}")
    if deadline is not None and not deadline > 0:
        raise ValueError(f"hook deadline must be a positive number of seconds, not {deadline!r}")

    def decorate(fn: F) -> F:
        setattr(fn, HOOK_ATTR, HookMeta(event, int(priority), deadline))
        return hookimpl(specname=event)(fn)

    return decorate


class _On:
    """`on.<event>(priority=Priority.MEDIUM, deadline=None)`: mark an `async def` method as a hook for that event.

    Higher priority runs first; `deadline` (seconds) overrides the engine's default hook deadline.
    """

    def im_message(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """An IM message arrived (earliest stage): `(event: KiraMessageEvent)`; choose the strategy here."""
        return _hook(EventType.IM_MESSAGE.value, priority, deadline)

    def message_buffered(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """A message entered its session buffer: `(event: KiraMessageEvent)`."""
        return _hook(EventType.MESSAGE_BUFFERED.value, priority, deadline)

    def im_batch_message(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """Messages were merged into a turn: `(event: KiraMessageBatchEvent)`."""
        return _hook(EventType.IM_BATCH_MESSAGE.value, priority, deadline)

    def llm_request(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """Before each model call: `(event, req: LLMRequest, tag_set: TagSet)`; inject prompts, tools and tags."""
        return _hook(EventType.LLM_REQUEST.value, priority, deadline)

    def llm_response(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """After the model answered: `(event, resp: LLMResponse)`."""
        return _hook(EventType.LLM_RESPONSE.value, priority, deadline)

    def after_xml_parse(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """Once per parsed outgoing message, before it is sent: `(event, chain: MessageChain)`, mutable."""
        return _hook(EventType.AFTER_XML_PARSE.value, priority, deadline)

    def tool_result(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """After each tool call returned: `(event, result: ToolResult)`."""
        return _hook(EventType.TOOL_RESULT.value, priority, deadline)

    def step_result(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """After each agent step: `(event, resp: LLMResponse)`; `resp.step` holds what the step sent."""
        return _hook(EventType.STEP_RESULT.value, priority, deadline)

    def final_result(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """Exactly once per turn, at its end: `(event, chain: MessageChain)`, everything the turn sent."""
        return _hook(EventType.FINAL_RESULT.value, priority, deadline)

    def message_sent(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """After the adapter sent a message: `(event, result: KiraIMSentResult)`."""
        return _hook(EventType.MESSAGE_SENT.value, priority, deadline)

    def loaded(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """After plugins were loaded (app start, or this plugin enabled): `(event: KiraLifecycleEvent)`."""
        return _hook(EventType.LOADED.value, priority, deadline)

    def shutdown(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """Before the app stops: `(event: KiraLifecycleEvent)`."""
        return _hook(EventType.SHUTDOWN.value, priority, deadline)

    def exception(self, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """A hook, tag handler or pipeline stage failed: `(event: KiraExceptionEvent)`."""
        return _hook(EventType.EXCEPTION.value, priority, deadline)

    def __getattr__(self, name: str) -> Any:
        """A misspelt event (`@on.im_mesage()`) fails at import with the events there are and the nearest one."""
        if name.startswith("__"):
            raise AttributeError(name)
        events = [e.value for e in EventType]
        near = difflib.get_close_matches(name, events, n=1)
        hint = f"did you mean on.{near[0]}? " if near else ""
        raise AttributeError(f"there is no hook event on.{name}: {hint}(events: {', '.join(events)})")

    def custom_event(self, event_name: str, priority: int = 0, deadline: float | None = None) -> Callable[[F], F]:
        """A custom event dispatched with `ctx.dispatch_custom(event_name, data)`: `(event: KiraCustomEvent)`."""
        if not event_name or not isinstance(event_name, str):
            raise ValueError("custom_event needs a non-empty event_name")
        return _hook(custom_event_name(event_name), priority, deadline)


#: The hook decorators: `@on.im_message()`, `@on.llm_request(priority=Priority.HIGH)`, ...
on = _On()


class _Register:
    """`@register.tool(...)` and `@register.tag(...)`: declare a plugin method as a model tool or an output tag;
    `@register.page(...)` and `@register.api(...)`: a web page or an HTTP endpoint of the plugin in the console."""

    def page(self, route: str, auth: bool = True, menu: PageMenu | dict[str, Any] | None = None) -> Callable[[F], F]:
        """Declare a method returning a `PluginPage` as the console page `/page/plugin/<plugin_id><route>`,
        listed in the console's menu when `menu` is given. Pages stay behind the console's token either way."""
        meta = page_meta(route, auth, menu)

        def decorate(fn: F) -> F:
            setattr(fn, PAGE_ATTR, meta)
            return fn

        return decorate

    def api(self, method: str, path: str, auth: bool = True, **options: Any) -> Callable[[F], F]:
        """Declare `async def method(self, request)` (or with parameters named after path and query parameters, and
        `body` for the JSON body) as the endpoint `<METHOD> /api/plugin/<plugin_id><path>`; it returns JSON data,
        a str or a Starlette response."""
        meta = api_meta(method, path, auth, options)

        def decorate(fn: F) -> F:
            _require_async(fn, "@register.api")
            setattr(fn, API_ATTR, meta)
            return fn

        return decorate

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

    def tag(self, name: str, description: str) -> Callable[[F], F]:
        """Declare `async def method(self, value, **attrs) -> list[BaseMessageElement]` as an output tag handler."""
        validate_tag_name(name)

        def decorate(fn: F) -> F:
            _require_async(fn, "@register.tag")
            setattr(fn, TAG_ATTR, TagMeta(name, description))
            return fn

        return decorate


def _require_async(fn: Callable[..., Any], what: str) -> None:
    if not inspect.iscoroutinefunction(fn):
        raise TypeError(f"{what} needs an 'async def' function; {fn.__qualname__} is not async")


#: Tool and tag declarations: `@register.tool(name, description, params)`, `@register.tag(name, description)`.
register = _Register()

#: Alias of `register.tool`, for plugins written as `@register_tool(...)`.
register_tool = register.tool

