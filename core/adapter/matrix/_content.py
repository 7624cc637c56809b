"""Matrix message content and hookchat's elements, both ways, without a connection: what an event says (its text,
the event it replies to, whether it mentions the bot) and which events a `MessageChain` becomes."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.chat.message_elements import At, BaseMessageElement, File, Image, Record, Reply, Sticker, Text, Video

__all__ = [
    "MEDIA_MSGTYPES",
    "TextPart",
    "MediaPart",
    "replied_to",
    "is_edit",
    "text_of",
    "mentions",
    "plan_events",
    "split_text",
    "pill",
]

#: `msgtype` of a media message -> the element it becomes (a sticker is its own event type, `m.sticker`).
MEDIA_MSGTYPES: dict[str, type[Image | File | Record | Video]] = {
    "m.image": Image,
    "m.file": File,
    "m.audio": Record,
    "m.video": Video,
}
_MSGTYPE_OF: dict[type[Image | File | Record | Video | Sticker], str] = {
    Image: "m.image",
    File: "m.file",
    Record: "m.audio",
    Video: "m.video",
    Sticker: "m.sticker",
}
_MATRIX_TO = "https://matrix.to/#/"


def _relates_to(content: dict[str, Any]) -> dict[str, Any]:
    relates = content.get("m.relates_to")
    return relates if isinstance(relates, dict) else {}


def replied_to(content: dict[str, Any]) -> str | None:
    """The event id this message replies to (`m.relates_to.m.in_reply_to.event_id`), or None."""
    in_reply_to = _relates_to(content).get("m.in_reply_to")
    event_id = in_reply_to.get("event_id") if isinstance(in_reply_to, dict) else None
    return event_id if isinstance(event_id, str) and event_id else None


def is_edit(content: dict[str, Any]) -> bool:
    """An edit of an earlier message (`rel_type: m.replace`); the adapter does not deliver edits."""
    return _relates_to(content).get("rel_type") == "m.replace"


def text_of(content: dict[str, Any]) -> str:
    """The message's text: `body` without the quoted fallback (`> <@user> ...` lines) that older clients put at
    the top of a reply."""
    body = content.get("body")
    if not isinstance(body, str):
        return ""
    if replied_to(content) and body.startswith("> "):
        lines = body.split("\n")
        n = 0
        while n < len(lines) and lines[n].startswith(">"):
            n += 1
        if n < len(lines) and lines[n] == "":
            return "\n".join(lines[n + 1 :])
    return body


def mentions(content: dict[str, Any], user_id: str, display_name: str | None) -> bool:
    """Whether the message mentions `user_id`: by `m.mentions.user_ids` when the sender's client set it (newer
    clients always do, and then nothing else counts), else by a pill (`https://matrix.to/#/<user id>`) in
    `formatted_body`, or the user id or display name in the text (as a word, ignoring case)."""
    declared = content.get("m.mentions")
    if isinstance(declared, dict):
        ids = declared.get("user_ids")
        return isinstance(ids, list) and user_id in ids
    formatted = content.get("formatted_body")
    if isinstance(formatted, str) and (_MATRIX_TO + user_id) in html.unescape(formatted).replace("%40", "@"):
        return True
    text = text_of(content).casefold()
    for name in (user_id, display_name):
        if name and re.search(rf"(?<![\w@]){re.escape(name.casefold())}(?!\w)", text):
            return True
    return False


@dataclass
class TextPart:
    """One text event to send: the plain body, the HTML body (only when it has pills), who it mentions, and the
    event it replies to."""

    body: str = ""
    formatted: str = ""
    has_html: bool = False
    user_ids: list[str] = field(default_factory=list)
    room: bool = False
    reply_to: str | None = None

    def content(self, msgtype: str = "m.text") -> dict[str, Any]:
        """The event's content (`m.room.message`)."""
        content: dict[str, Any] = {"msgtype": msgtype, "body": self.body}
        if self.has_html:
            content["format"] = "org.matrix.custom.html"
            content["formatted_body"] = self.formatted
        mentions: dict[str, Any] = {}
        if self.user_ids:
            mentions["user_ids"] = list(dict.fromkeys(self.user_ids))
        if self.room:
            mentions["room"] = True
        content["m.mentions"] = mentions  # present and empty: "mentions nobody", so no client guesses from the text
        if self.reply_to:
            content["m.relates_to"] = {"m.in_reply_to": {"event_id": self.reply_to}}
        return content


@dataclass
class MediaPart:
    """One media event to send: the element (uploaded first, unless its URL is already `mxc://`), its event type
    (`m.sticker`) or `msgtype`, and the event it replies to."""

    element: Image | File | Record | Video | Sticker
    msgtype: str
    reply_to: str | None = None


def pill(user_id: str, name: str) -> str:
    """The HTML of a mention of `user_id` shown as `name` (a "pill" in Element)."""
    return f'<a href="{_MATRIX_TO}{html.escape(user_id)}">{html.escape(name)}</a>'


def plan_events(
    chain: Iterable[BaseMessageElement], names: Mapping[str, str | None] | None = None
) -> list[TextPart | MediaPart]:
    """The events `chain` becomes, in order: consecutive text and mentions make one text event, each media element
    its own event; a `Reply` makes the first event a reply. `names` maps user ids to the display names mentions
    show (else, or when None, the `At`'s nickname, else the id). An `Image` by http(s) URL is sent as its link: hookchat does not
    fetch a URL the model wrote. Elements Matrix has no form for become their text (`repr_text`)."""
    names = names or {}
    parts: list[TextPart | MediaPart] = []
    reply_to: str | None = None
    current: TextPart | None = None

    def text_part() -> TextPart:
        nonlocal current
        if current is None:
            current = TextPart()
            parts.append(current)
        return current

    def add_text(text: str) -> None:
        part = text_part()
        part.body += text
        part.formatted += html.escape(text).replace("\n", "<br/>")

    for element in chain:
        if isinstance(element, Reply):
            reply_to = reply_to or str(element.message_id)
        elif isinstance(element, Text):
            add_text(str(element.text))
        elif isinstance(element, At):
            part = text_part()
            if element.user_id == "all":
                part.body += "@room"
                part.formatted += "@room"
                part.room = True
            else:
                uid = str(element.user_id)
                name = names.get(uid) or element.nickname or uid
                part.body += name
                part.formatted += pill(uid, name)
                part.has_html = True
                part.user_ids.append(uid)
        elif isinstance(element, Image | File | Record | Video | Sticker) and type(element) in _MSGTYPE_OF:
            if element.source == "url" and not str(element.url).startswith("mxc://"):
                add_text(str(element.url))
                continue
            current = None
            parts.append(MediaPart(element, _MSGTYPE_OF[type(element)]))
        else:
            add_text(element.repr_text())
    parts = [p for p in parts if not isinstance(p, TextPart) or p.body.strip() or p.user_ids or p.room]
    if parts and reply_to:
        parts[0].reply_to = reply_to
    return parts


def split_text(part: TextPart, limit: int) -> list[TextPart]:
    """`part` as several text events of at most `limit` characters each (a Matrix event is at most 64 KiB), cut at
    a line break or space where there is one. A part with mentions or HTML is cut as plain text, keeping its
    mentions on the first piece."""
    if len(part.body) <= limit:
        return [part]
    pieces: list[str] = []
    rest = part.body
    while len(rest) > limit:
        cut = max(rest.rfind("\n", 0, limit), rest.rfind(" ", 0, limit))
        cut = cut + 1 if cut > limit // 2 else limit
        pieces.append(rest[:cut])
        rest = rest[cut:]
    pieces.append(rest)
    out = [TextPart(body=p, formatted=html.escape(p).replace("\n", "<br/>")) for p in pieces if p]
    out[0].user_ids, out[0].room, out[0].reply_to = part.user_ids, part.room, part.reply_to
    return out
