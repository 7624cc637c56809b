"""Event names and priorities: the vocabulary hooks are registered under."""

from __future__ import annotations

import enum

__all__ = [
    "Priority",
    "EventType",
    "EVENT_ARGUMENTS",
    "CUSTOM_PREFIX",
    "custom_event_name",
    "event_arguments",
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


class EventType(str, enum.Enum):
    """Every event a hook can listen to. The value is the hook name used for dispatch and introspection."""

    IM_MESSAGE = "im_message"
    MESSAGE_BUFFERED = "message_buffered"
    IM_BATCH_MESSAGE = "im_batch_message"
    LLM_REQUEST = "llm_request"
    LLM_RESPONSE = "llm_response"
    AFTER_XML_PARSE = "after_xml_parse"
    TOOL_RESULT = "tool_result"
    STEP_RESULT = "step_result"
    FINAL_RESULT = "final_result"
    MESSAGE_SENT = "message_sent"
    LOADED = "loaded"
    SHUTDOWN = "shutdown"
    EXCEPTION = "exception"
    CUSTOM_EVENT = "custom_event"


#: The positional arguments each event passes its hooks (after `self`); a hook must accept them.
EVENT_ARGUMENTS: dict[str, tuple[str, ...]] = {
    EventType.IM_MESSAGE.value: ("event",),
    EventType.MESSAGE_BUFFERED.value: ("event",),
    EventType.IM_BATCH_MESSAGE.value: ("event",),
    EventType.LLM_REQUEST.value: ("event", "req", "tag_set"),
    EventType.LLM_RESPONSE.value: ("event", "resp"),
    EventType.AFTER_XML_PARSE.value: ("event", "chain"),
    EventType.TOOL_RESULT.value: ("event", "result"),
    EventType.STEP_RESULT.value: ("event", "resp"),
    EventType.FINAL_RESULT.value: ("event", "chain"),
    EventType.MESSAGE_SENT.value: ("event", "result"),
    EventType.LOADED.value: ("event",),
    EventType.SHUTDOWN.value: ("event",),
    EventType.EXCEPTION.value: ("event",),
}

CUSTOM_PREFIX = "custom_event:"


def custom_event_name(event_name: str) -> str:
    """The dispatch name of the custom event `event_name`."""
    return CUSTOM_PREFIX + event_name


_PIPELINE_ORDER = {e.value: i for i, e in enumerate(EventType)}


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
    return EVENT_ARGUMENTS.get(event, ("event",))
