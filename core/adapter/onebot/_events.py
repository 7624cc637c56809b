"""The frames a OneBot v11 implementation sends, as typed models, and the `KiraIMMessage` each event becomes.

Ids arrive as numbers or strings depending on the implementation (NapCat's mock sends `message_id` as a string,
`user_id` as a number); every id here is a string. Which events are delivered: private and group messages from
others, and the notices hookchat models (pokes, recalls, someone joining a group); never the bot's own messages.
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from core.adapter.onebot._segments import Segment, to_chain
from core.chat.message_elements import At, Notice, Poke, Reply
from core.chat.message_utils import KiraIMMessage, MessageChain
from core.chat.session import Group, Session, User

__all__ = [
    "Frame",
    "Sender",
    "MessageEvent",
    "NoticeEvent",
    "MetaEvent",
    "ActionResponse",
    "parse_frame",
    "MalformedFrame",
    "message_of",
    "notice_of",
    "mentions",
    "quoted_id",
    "group_of",
]


class MalformedFrame(ValueError):
    """A frame that is not JSON, not an object, or not a event or answer of the shape OneBot v11 defines."""


class Frame(BaseModel):
    """Base of the frame models: unknown fields are kept (`model_extra`), numbers become strings where a str is
    declared, so ids of either type read the same. Message events (the most frequent, two per turn with their
    answers) keep only their declared fields: the whole event is the message's `raw`."""

    model_config = ConfigDict(extra="allow", coerce_numbers_to_str=True)


class Sender(Frame):
    """The `sender` object of a message event; `card` is the group nickname (may be empty); `group_id` is where a
    temporary chat started (go-cqhttp puts it here, NapCat on the event)."""

    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    user_id: str = ""
    nickname: str = ""
    card: str = ""
    group_id: str | None = None


class MessageEvent(Frame):
    """A private or group message (`post_type` `message`), or a copy of one the bot sent (`message_sent`). A
    private message of `sub_type` `group` is a temporary chat someone started from a group: `temp_group` names it."""

    model_config = ConfigDict(extra="ignore", coerce_numbers_to_str=True)

    post_type: Literal["message", "message_sent"]
    message_type: Literal["private", "group"]
    sub_type: str = ""
    message_id: str
    user_id: str
    group_id: str | None = None
    message: list[Segment] | str
    sender: Sender = Sender()
    time: float = 0
    self_id: str

    @property
    def temp_group(self) -> str | None:
        """The group a temporary chat came from (None for any other message): the event's `group_id` (NapCat) or
        the sender's (go-cqhttp)."""
        if self.message_type != "private" or self.sub_type != "group":
            return None
        return self.group_id or self.sender.group_id or None


class NoticeEvent(Frame):
    """A notice (`post_type` `notice`); which fields are set depends on `notice_type` and `sub_type`."""

    post_type: Literal["notice"]
    notice_type: str
    sub_type: str = ""
    user_id: str = ""
    group_id: str | None = None
    operator_id: str = ""
    target_id: str = ""
    message_id: str = ""
    time: float = 0
    self_id: str


class MetaEvent(Frame):
    """A meta event: `lifecycle` (a connection's first frame) or `heartbeat` (`interval` in milliseconds)."""

    post_type: Literal["meta_event"]
    meta_event_type: str
    sub_type: str = ""
    interval: float | None = None
    self_id: str = ""


class ActionResponse(Frame):
    """The answer to an action: `status` `ok` (or `async`) with `data`, or `failed` with `retcode` and the
    platform's words in `wording` or `message`."""

    status: str
    retcode: int = 0
    data: Any = None
    message: str = ""
    wording: str = ""
    echo: Any = None


class OtherEvent(Frame):
    """An event hookchat does not act on (requests, notices of other types are `NoticeEvent`)."""

    post_type: str
    self_id: str = ""


_EVENT_MODELS: dict[str, type[MessageEvent | NoticeEvent | MetaEvent]] = {
    "message": MessageEvent,
    "message_sent": MessageEvent,
    "notice": NoticeEvent,
    "meta_event": MetaEvent,
}


def parse_frame(data: Any) -> MessageEvent | NoticeEvent | MetaEvent | ActionResponse | OtherEvent:
    """The model of one decoded frame: an event by its `post_type`, else an `ActionResponse`. Raises
    `MalformedFrame` saying what is wrong."""
    if not isinstance(data, dict):
        raise MalformedFrame(f"a frame must be a JSON object, not {type(data).__name__}")
    post_type = data.get("post_type")
    model = _EVENT_MODELS.get(post_type, OtherEvent) if post_type is not None else ActionResponse
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'frame'}: {e['msg']}" for e in exc.errors())
        raise MalformedFrame(f"{post_type or 'answer'} frame: {problems}") from None


def mentions(chain: MessageChain, self_id: str) -> bool:
    """Whether the chain `at`s the bot account `self_id` (an `at` of everyone does not count)."""
    return any(isinstance(e, At) and e.user_id == self_id for e in chain)


def quoted_id(chain: MessageChain) -> str | None:
    """The message id the chain replies to, if it quotes one."""
    return next((e.message_id for e in chain if isinstance(e, Reply) and e.message_id), None)


def _where(adapter_name: str, user_id: str, group_id: str | None, group_name: str) -> tuple[Session, Group | None]:
    if group_id:
        return Session(adapter_name, "gm", group_id), Group(group_id, group_name)
    return Session(adapter_name, "dm", user_id), None


def group_of(event: MessageEvent | NoticeEvent) -> str | None:
    """The group an event happened in (None: a private chat, a temporary one included)."""
    if isinstance(event, MessageEvent) and event.message_type != "group":
        return None
    return event.group_id or None


def message_of(
    event: MessageEvent, adapter_name: str, *, to_me: bool, raw: dict[str, Any], group_name: str = ""
) -> KiraIMMessage:
    """The `KiraIMMessage` of a message event; `to_me` (mentioned, a reply to the bot, or a private chat) is
    decided by the caller, which may have to ask the platform who wrote a quoted message, and the group's name
    (`get_group_info`) too."""
    session, group = _where(adapter_name, event.user_id, group_of(event), group_name)
    nickname = event.sender.card or event.sender.nickname
    return KiraIMMessage(
        to_chain(event.message),
        User(event.user_id, nickname),
        session,
        group=group,
        message_id=event.message_id,
        is_mentioned=to_me,
        timestamp=event.time or time.time(),
        raw=raw,
        self_id=event.self_id,
    )


def notice_of(
    event: NoticeEvent, adapter_name: str, *, raw: dict[str, Any], group_name: str = ""
) -> KiraIMMessage | None:
    """The `KiraIMMessage` of a poke, a recall or a member joining (`is_notice`); None for other notices and for
    what the bot did itself. A poke aimed at the bot counts as a mention."""
    kind, self_id = event.notice_type, event.self_id
    if event.user_id == self_id and kind != "group_increase":
        return None
    if kind == "notify" and event.sub_type == "poke":
        chain = MessageChain([Poke(event.target_id)])
        to_me = event.target_id == self_id
        kind = "poke"
    elif kind in ("group_recall", "friend_recall"):
        who = event.operator_id or event.user_id
        chain = MessageChain([Notice(f"{who} recalled message {event.message_id}", kind=kind)])
        to_me = False
    elif kind == "group_increase":
        chain = MessageChain([Notice(f"{event.user_id} joined the group", kind=kind)])
        to_me = False
    else:
        return None
    sender = event.operator_id if kind == "group_recall" and event.operator_id else event.user_id
    session, group = _where(adapter_name, sender, group_of(event), group_name)
    return KiraIMMessage(
        chain,
        User(sender),
        session,
        group=group,
        is_mentioned=to_me,
        timestamp=event.time or time.time(),
        raw=raw,
        is_notice=True,
        self_id=self_id,
    )
