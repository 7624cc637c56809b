"""Cross-checks against `nonebot-adapter-onebot`, whose models were written by others from the same spec: every
event the adapter turned into a message must parse there into the event class that matches what the adapter
concluded (a malformed event silently falls back to the base `Event` there, so the class is asserted), and every
segment array the bot sends must parse there into the same segments."""

from __future__ import annotations

from typing import Any

from nonebot.adapters.onebot.v11 import Adapter, Message
from nonebot.adapters.onebot.v11.event import (
    Event,
    FriendRecallNoticeEvent,
    GroupIncreaseNoticeEvent,
    GroupMessageEvent,
    GroupRecallNoticeEvent,
    PokeNotifyEvent,
    PrivateMessageEvent,
)
from pydantic import TypeAdapter

from core.adapter.onebot import parse_cq
from core.chat.message_elements import Notice, Poke
from core.chat.message_utils import KiraIMMessage

__all__ = ["nonebot_event", "expected_class", "assert_delivered_agrees", "assert_sent_parses", "nonebot_segments"]

_NOTICE_CLASSES = {
    "group_recall": GroupRecallNoticeEvent,
    "friend_recall": FriendRecallNoticeEvent,
    "group_increase": GroupIncreaseNoticeEvent,
}
_MESSAGE = TypeAdapter(Message)


def nonebot_event(raw: dict[str, Any]) -> Event | None:
    """The event nonebot makes of a raw OneBot event."""
    return Adapter.json_to_event(raw)


def expected_class(message: KiraIMMessage) -> type[Event]:
    """The nonebot event class matching what the adapter made of the event."""
    if message.is_notice:
        first = message.chain[0]
        if isinstance(first, Poke):
            return PokeNotifyEvent
        assert isinstance(first, Notice)
        return _NOTICE_CLASSES[first.kind]
    return GroupMessageEvent if message.session.is_group else PrivateMessageEvent


def assert_delivered_agrees(message: KiraIMMessage) -> None:
    """The raw event behind `message` is, for nonebot, an event of the matching class (and ids agree)."""
    event = nonebot_event(message.raw)
    assert type(event) is expected_class(message), (type(event), message)
    assert str(event.self_id) == message.self_id
    if not message.is_notice:
        assert str(event.message_id) == message.message_id
        assert str(event.get_user_id()) == message.sender.user_id


def nonebot_segments(message: list[dict[str, Any]] | str) -> list[dict[str, Any]]:
    """The segments nonebot reads from a message in either form."""
    parsed = Message(message) if isinstance(message, str) else _MESSAGE.validate_python(message)
    return [{"type": s.type, "data": dict(s.data)} for s in parsed]


def assert_sent_parses(params: dict[str, Any]) -> None:
    """The `message` of a send parses in nonebot into exactly the segments sent (the array form), or into the
    segments our CQ parser reads (the string form)."""
    message = params["message"]
    if isinstance(message, str):
        assert nonebot_segments(message) == parse_cq(message)
    else:
        assert nonebot_segments(message) == message
