"""Event names and priorities: the vocabulary hooks are registered under.

`EventType` is the one table of events: each row gives the event's dispatch name, the arguments its hooks are
called with and when it fires, in the order a message meets them. The `@on.<event>()` decorators, the names
`HookEngine.dispatch` accepts and the events list of docs/plugins.md are all read off it, so adding an event is
one row here.
"""

from __future__ import annotations

import difflib
import enum

__all__ = [
    "Priority",
    "EventType",
    "UnknownEventError",
    "CUSTOM_PREFIX",
    "check_event_name",
    "custom_event_name",
    "event_arguments",
    "events_table",
    "pipeline_order",
    "priority_name",
]


class Priority(enum.IntEnum):
    """Hook priority: higher runs first. Any int is accepted; these are the named levels."""

    SYS_HIGH = 100  # reserved for the framework
    HIGH = 50  # e.g. message pre-processing
    MEDIUM = 0  # the default
    LOW = -50  # e.g. post-processing
    SYS_LOW = -100  # reserved for the framework


class EventType(enum.StrEnum):
    """Every event a hook can listen to, in pipeline order. The value is the dispatch name; `arguments` are the
    positional arguments its hooks get, as `name: Type` (the type left out where the row above says it);
    `when` says when it fires. `CUSTOM_EVENT` stands for every `custom_event:<name>`."""

    arguments: tuple[str, ...]
    when: str

    def __new__(cls, name: str, arguments: tuple[str, ...] = (), when: str = "") -> EventType:
        member = str.__new__(cls, name)
        member._value_ = name
        member.arguments = arguments
        member.when = when
        return member

    IM_MESSAGE = (
        "im_message",
        ("event: KiraMessageEvent",),
        "a message arrived (the earliest stage): choose its strategy here",
    )
    MESSAGE_BUFFERED = "message_buffered", ("event: KiraMessageEvent",), "the message entered its session's buffer"
    IM_BATCH_MESSAGE = (
        "im_batch_message",
        ("event: KiraMessageBatchEvent",),
        "buffered messages were merged into one turn",
    )
    LLM_REQUEST = (
        "llm_request",
        ("event", "req: LLMRequest", "tag_set: TagSet"),
        "before each model call: add prompts, tools, tags",
    )
    LLM_RESPONSE = "llm_response", ("event", "resp: LLMResponse"), "the model answered"
    AFTER_XML_PARSE = (
        "after_xml_parse",
        ("event", "chain: MessageChain"),
        "once per outgoing message, before it is sent; mutable, an emptied chain is not sent",
    )
    TOOL_RESULT = "tool_result", ("event", "result: ToolResult"), "a tool call returned"
    STEP_RESULT = "step_result", ("event", "resp: LLMResponse"), "after each agent step"
    FINAL_RESULT = "final_result", ("event", "chain: MessageChain"), "once per turn, at its end"
    MESSAGE_SENT = "message_sent", ("event", "result: KiraIMSentResult"), "the platform sent a message"
    LOADED = (
        "loaded",
        ("event: KiraLifecycleEvent",),
        "plugins were loaded (app start, or one plugin enabled)",
    )
    SHUTDOWN = "shutdown", ("event: KiraLifecycleEvent",), "the app is stopping"
    EXCEPTION = "exception", ("event: KiraExceptionEvent",), "a hook failed or timed out (see below)"
    CUSTOM_EVENT = (
        "custom_event",
        ("event: KiraCustomEvent",),
        "a plugin dispatched that custom event (see below)",
    )

    @property
    def parameters(self) -> tuple[str, ...]:
        """The argument names alone: what a hook of this event must accept after `self`."""
        return tuple(argument.partition(":")[0] for argument in self.arguments)

    @property
    def signature(self) -> str:
        """How its hooks are called, as the docs show it: `(event, resp: LLMResponse)`."""
        return f"({', '.join(self.arguments)})"


CUSTOM_PREFIX = "custom_event:"
_BY_NAME = {e.value: e for e in EventType if e is not EventType.CUSTOM_EVENT}
_PIPELINE_ORDER = {e.value: i for i, e in enumerate(EventType)}


class UnknownEventError(LookupError):
    """A dispatch named an event that is not in `EventType` (nor a `custom_event:<name>`): no hook could run."""


def check_event_name(event: str) -> EventType:
    """The row of `event` (`CUSTOM_EVENT` for `custom_event:<name>`), or `UnknownEventError` naming the events."""
    found = _BY_NAME.get(event)
    if found is not None:
        return found
    if isinstance(event, str) and event.startswith(CUSTOM_PREFIX) and len(event) > len(CUSTOM_PREFIX):
        return EventType.CUSTOM_EVENT
    near = difflib.get_close_matches(str(event), list(_BY_NAME), n=1)
    hint = f"did you mean {near[0]!r}? " if near else ""
    raise UnknownEventError(
        f"there is no event {event!r}: {hint}(events: {', '.join(_BY_NAME)}, or {CUSTOM_PREFIX}<name>)"
    )


def custom_event_name(event_name: str) -> str:
    """The dispatch name of the custom event `event_name`."""
    return CUSTOM_PREFIX + event_name


def pipeline_order(event: str) -> tuple[int, str]:
    """A sort key putting events in the order a message meets them (`EventType` order), custom events last."""
    return _PIPELINE_ORDER.get(event, len(_PIPELINE_ORDER)), event


def priority_name(priority: int) -> str:
    """`HIGH (50)` for a named priority, `7` for any other int."""
    try:
        return f"{Priority(priority).name} ({priority})"
    except ValueError:
        return str(priority)


def event_arguments(event: str) -> tuple[str, ...]:
    """The positional arguments the hooks of `event` receive (a custom event passes its event only)."""
    return check_event_name(event).parameters


def events_table() -> str:
    """The events list of docs/plugins.md, as Markdown: one row per event, read off `EventType`."""
    rows = ["| decorator | when | called with |", "| --- | --- | --- |"]
    for event in EventType:
        call = 'custom_event(event_name="...")' if event is EventType.CUSTOM_EVENT else f"{event.value}()"
        rows.append(f"| `@on.{call}` | {event.when} | `{event.signature}` |")
    return "\n".join(rows)
