"""Discord messages and hookchat's elements, both ways, without a connection: `<@id>` mentions in a message's
content to `At`, attachments by their content type to media elements, and a chain to the messages it takes (text
split at Discord's 2,000-character limit, files and embeds with the last part)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.adapter.media import MediaElement
from core.chat.message_elements import At, BaseMessageElement, File, Image, Json, Record, Reply, Sticker, Text, Video

__all__ = [
    "TEXT_LIMIT",
    "MAX_ATTACHMENTS",
    "Part",
    "content_to_elements",
    "attachment_element",
    "to_parts",
    "split_content",
]

#: Discord's limit for one message's content, in characters.
TEXT_LIMIT = 2000
#: Files (and embeds) one Discord message can carry.
MAX_ATTACHMENTS = 10

_MENTION = re.compile(r"<@!?(\d+)>")


def content_to_elements(content: str, names: dict[int, str]) -> list[BaseMessageElement]:
    """The elements of a message's content: each user mention `<@id>` (or `<@!id>`) becomes `At(id, name)` with
    the display name from `names` (the message's resolved mentions); everything else is text."""
    elements: list[BaseMessageElement] = []
    position = 0
    for match in _MENTION.finditer(content):
        if match.start() > position:
            elements.append(Text(content[position : match.start()]))
        user_id = int(match.group(1))
        elements.append(At(str(user_id), names.get(user_id)))
        position = match.end()
    if position < len(content):
        elements.append(Text(content[position:]))
    return elements


def attachment_element(url: str, filename: str, content_type: str | None) -> MediaElement:
    """An attachment as an element by its content type: `image/*` an `Image`, `audio/*` a `Record`, `video/*` a
    `Video`, anything else a `File`; the element points at Discord's CDN URL."""
    kind = (content_type or "").split("/", 1)[0]
    cls: type[MediaElement] = {"image": Image, "audio": Record, "video": Video}.get(kind, File)
    return cls(url=url, name=filename, mime=content_type)


@dataclass
class Part:
    """One Discord message to send: its content, the media to upload with it, embeds (Bot API dicts), and the
    message it replies to (first part only)."""

    content: str = ""
    files: list[MediaElement] = field(default_factory=list)
    embeds: list[dict[str, Any]] = field(default_factory=list)
    reply_to: int | None = None


def split_content(text: str, limit: int = TEXT_LIMIT) -> list[str]:
    """`text` in pieces of at most `limit` characters, cut at the last line break within the limit, else the last
    space, else where it must be; pieces of blank text are dropped."""
    pieces: list[str] = []
    while len(text) > limit:
        head = text[:limit]
        cut = head.rfind("\n")
        if cut <= 0:
            cut = head.rfind(" ")
        cut = cut + 1 if cut > 0 else limit
        pieces.append(text[:cut])
        text = text[cut:]
    pieces.append(text)
    return [p for p in pieces if p.strip()]


def embed_of(element: Json) -> dict[str, Any] | None:
    """The embed a `Json` element asks for (`Json({"embed": {"title": ..., "description": ..., "url": ...,
    "color": ...}})`, what the `<embed>` tag makes), or None when it is not one."""
    data = element.data
    if isinstance(data, dict) and isinstance(data.get("embed"), dict):
        return data["embed"]
    return None


def to_parts(chain: list[BaseMessageElement], *, limit: int = TEXT_LIMIT) -> list[Part]:
    """The messages `chain` takes on Discord, in order: text and mentions (`<@id>`) split at `limit`; media and
    embeds go with the last part (at most 10 each per message, more in parts of their own). Media given only by
    a URL are linked in the text (an image by URL is shown by an embed): hookchat does not fetch what the model
    names. A `Reply` makes the first part a reply."""
    text: list[str] = []
    files: list[MediaElement] = []
    embeds: list[dict[str, Any]] = []
    reply_to: int | None = None
    for element in chain:
        if isinstance(element, Text):
            text.append(element.text)
        elif isinstance(element, At):
            text.append(f"<@{element.user_id}>" if element.user_id.isdigit() else f"@{element.user_id.lstrip('@')}")
        elif isinstance(element, Reply):
            if element.message_id.isdigit() and reply_to is None:
                reply_to = int(element.message_id)
        elif isinstance(element, Json):
            embed = embed_of(element)
            if embed is not None:
                embeds.append(embed)
        elif isinstance(element, (Image, Sticker, Record, File, Video)):
            if element.source == "url" and element.url:
                if isinstance(element, Image):
                    embeds.append({"image": element.url})
                else:
                    text.append(f"\n{element.url}")
            else:
                files.append(element)
    parts = [Part(content=piece) for piece in split_content("".join(text), limit)]
    while files or embeds:
        if not parts or len(parts[-1].files) + len(parts[-1].embeds) > 0:
            parts.append(Part())
        parts[-1].files, files = files[:MAX_ATTACHMENTS], files[MAX_ATTACHMENTS:]
        parts[-1].embeds, embeds = embeds[:MAX_ATTACHMENTS], embeds[MAX_ATTACHMENTS:]
    if parts and reply_to is not None:
        parts[0].reply_to = reply_to
    return parts
