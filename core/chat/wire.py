"""Messages as JSON data, for carrying them between processes (a gateway and its workers, see docs/scale-out.md).

`message_to_wire` and `message_from_wire` round-trip a `KiraIMMessage` (its elements, sender, session, group and
flags; not `raw`, the platform's own event, which stays with the adapter); `chain_to_wire` and `chain_from_wire`
do the same for a `MessageChain`. Media travel as the url, path or base64 they were given: a path is only
meaningful where the file is.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from core.chat import message_elements as elements
from core.chat.message_utils import KiraIMMessage, MessageChain
from core.chat.session import Group, Session, User

__all__ = [
    "WireError",
    "chain_to_wire",
    "chain_from_wire",
    "message_to_wire",
    "message_from_wire",
    "session_to_wire",
    "session_from_wire",
]

_CLASSES: dict[str, type[elements.BaseMessageElement]] = {
    cls.type: cls
    for cls in (
        elements.Text,
        elements.Image,
        elements.At,
        elements.Reply,
        elements.Forward,
        elements.Emoji,
        elements.Sticker,
        elements.Record,
        elements.Notice,
        elements.Poke,
        elements.Json,
        elements.File,
        elements.Video,
    )
}


class WireError(ValueError):
    """Data that does not describe a message: an unknown element type, a missing or mistyped field."""


def _element_to_wire(element: elements.BaseMessageElement) -> dict[str, Any]:
    data: dict[str, Any] = {"type": element.type}
    for f in dataclasses.fields(element):  # type: ignore[arg-type] - every element class is a dataclass
        if f.init and not f.name.startswith("_"):
            value = getattr(element, f.name)
            if isinstance(element, elements.Forward) and f.name == "messages":
                value = [[_element_to_wire(e) for e in message] for message in value]
            data[f.name] = value
    return data


def _element_from_wire(data: Any) -> elements.BaseMessageElement:
    if not isinstance(data, dict) or not isinstance(data.get("type"), str):
        raise WireError(f"a message element is an object with a `type`, not {data!r}")
    fields = dict(data)
    kind = fields.pop("type")
    cls = _CLASSES.get(kind)
    if cls is None:
        raise WireError(f"unknown message element type {kind!r}")
    if cls is elements.Forward:
        fields["messages"] = [[_element_from_wire(e) for e in message] for message in fields.get("messages", [])]
    try:
        return cls(**fields)
    except TypeError as exc:
        raise WireError(f"bad {kind!r} element {data!r}: {exc}") from exc


def chain_to_wire(chain: MessageChain) -> list[dict[str, Any]]:
    """The chain's elements as JSON-ready dicts (`type` plus the element's fields)."""
    return [_element_to_wire(e) for e in chain]


def chain_from_wire(data: Any) -> MessageChain:
    """The chain `chain_to_wire` made; `WireError` for data that is not one."""
    if not isinstance(data, list):
        raise WireError(f"a message chain is a list of elements, not {type(data).__name__}")
    return MessageChain([_element_from_wire(e) for e in data])


def session_to_wire(session: Session) -> list[str]:
    """The session as `[adapter, type, id]`."""
    return [session.adapter_name, session.session_type, session.session_id]


def session_from_wire(data: Any) -> Session:
    """The session `session_to_wire` made; `WireError` for data that is not one."""
    if not (isinstance(data, list) and len(data) == 3 and all(isinstance(part, str) for part in data)):
        raise WireError(f"a session is [adapter, type, id], not {data!r}")
    try:
        return Session(*data)
    except ValueError as exc:
        raise WireError(str(exc)) from exc


def message_to_wire(message: KiraIMMessage) -> dict[str, Any]:
    """The message as JSON-ready data (everything but `raw`)."""
    assert message.session is not None and message.sender is not None  # set by KiraMessageEvent / the adapter
    return {
        "chain": chain_to_wire(message.chain),
        "sender": [message.sender.user_id, message.sender.nickname],
        "session": session_to_wire(message.session),
        "group": [message.group.group_id, message.group.name] if message.group else None,
        "message_id": message.message_id,
        "is_mentioned": message.is_mentioned,
        "timestamp": message.timestamp,
        "is_notice": message.is_notice,
        "self_id": message.self_id,
        "extra": message.extra,
        "message_str": message.message_str,
    }


def message_from_wire(data: Any) -> KiraIMMessage:
    """The message `message_to_wire` made; `WireError` for data that is not one."""
    if not isinstance(data, dict):
        raise WireError(f"a message is an object, not {type(data).__name__}")
    try:
        group = data.get("group")
        return KiraIMMessage(
            chain_from_wire(data["chain"]),
            User(*map(str, data["sender"])),
            session_from_wire(data["session"]),
            group=Group(*map(str, group)) if group else None,
            message_id=str(data.get("message_id") or ""),
            is_mentioned=bool(data.get("is_mentioned")),
            timestamp=float(data["timestamp"]),
            is_notice=bool(data.get("is_notice")),
            self_id=str(data.get("self_id") or ""),
            extra=data.get("extra"),
            message_str=data.get("message_str"),
        )
    except (KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, WireError):
            raise
        raise WireError(f"bad message data: {type(exc).__name__}: {exc}") from exc
