"""Event names and priorities: the vocabulary hooks are registered under."""

from __future__ import annotations

import enum

__all__ = ["Priority", "EventType", "CUSTOM_PREFIX", "custom_event_name"]


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


CUSTOM_PREFIX = "custom_event:"


def custom_event_name(event_name: str) -> str:
    """The dispatch name of the custom event `event_name`."""
    return CUSTOM_PREFIX + event_name
