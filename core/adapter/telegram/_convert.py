"""Telegram messages and hookchat's elements, both ways, without a connection: the text of a message with its
entities (offsets in UTF-16 code units, as the Bot API counts) to `Text` and `At`, and a chain to the sends it
takes (text split at Telegram's 4,096-character limit, one send per photo, voice, document, sticker or video).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from core.adapter.media import MediaElement
from core.chat.message_elements import At, BaseMessageElement, File, Image, Record, Reply, Sticker, Text, Video

__all__ = ["TEXT_LIMIT", "MediaElement", "Outgoing", "entities_to_elements", "to_outgoing", "utf16_len", "split_text"]

#: Telegram's limit for one message's text, in UTF-16 code units (what the Bot API counts).
TEXT_LIMIT = 4096

#: The Bot API method that sends each kind of media element.
MEDIA_METHODS: dict[type[BaseMessageElement], str] = {
    Image: "photo",
    Sticker: "sticker",
    Record: "voice",
    File: "document",
    Video: "video",
}


def utf16_len(text: str) -> int:
    """The length of `text` as Telegram counts it: UTF-16 code units (an emoji outside the BMP counts 2)."""
    return len(text.encode("utf-16-le")) // 2  # in C: counting by character cost 30 us for 1,000 of them


def _utf16_slice(encoded: bytes, start: int, end: int) -> str:
    return encoded[start * 2 : end * 2].decode("utf-16-le", errors="replace")


def entities_to_elements(
    text: str, entities: list[Any] | None, *, bot_id: int, bot_username: str
) -> tuple[list[BaseMessageElement], bool]:
    """The elements of a message's text and whether it addresses the bot: `@username` mentions (`mention`) become
    `At("@username")`, or `At(<bot id>, <bot username>)` for the bot; `text_mention` (a user without a username)
    becomes `At(<user id>, <first name>)`; a `bot_command` ending in `@<bot username>` addresses the bot; a
    `text_link` keeps its address after its text. Other entities (bold, code, links...) are kept as their text."""
    if not text:
        return [], False
    if not entities:  # most messages: the text is all there is (and no UTF-16 offsets to count)
        return [Text(text)], False
    encoded = text.encode("utf-16-le")
    total = len(encoded) // 2
    elements: list[BaseMessageElement] = []
    to_me = False
    position = 0
    own = f"@{bot_username}".lower() if bot_username else None

    def plain(upto: int) -> None:
        if upto > position:
            piece = _utf16_slice(encoded, position, upto)
            if elements and isinstance(elements[-1], Text):
                elements[-1] = Text(elements[-1].text + piece)
            else:
                elements.append(Text(piece))

    for entity in sorted(entities, key=lambda e: e.offset):
        start, end = entity.offset, min(entity.offset + entity.length, total)
        if start < position or start >= total:
            continue  # nested or out of range: its text is already part of the enclosing piece
        piece = _utf16_slice(encoded, start, end)
        if entity.type == "mention":
            plain(start)
            if own is not None and piece.lower() == own:
                elements.append(At(str(bot_id), bot_username))
                to_me = True
            else:
                elements.append(At(piece))
            position = end
        elif entity.type == "text_mention" and entity.user is not None:
            plain(start)
            elements.append(At(str(entity.user.id), piece))
            to_me = to_me or entity.user.id == bot_id
            position = end
        elif entity.type == "text_link" and entity.url:
            plain(end)
            position = end
            plain_text = f" ({entity.url})"
            if elements and isinstance(elements[-1], Text):
                elements[-1] = Text(elements[-1].text + plain_text)
            else:
                elements.append(Text(plain_text))
        elif entity.type == "bot_command" and own is not None and piece.lower().endswith(own):
            to_me = True
    plain(total)
    return elements, to_me


@dataclass
class Outgoing:
    """One Bot API send: a text (`method = "message"`, with `entities` as Bot API dicts) or one media element
    (`method` is `photo`, `voice`, `document`, `sticker` or `video`). `reply_to` quotes a message (first send
    only)."""

    method: str
    text: str = ""
    entities: list[dict[str, Any]] = field(default_factory=list)
    media: MediaElement | None = None
    reply_to: int | None = None


def split_text(
    pieces: list[tuple[str, dict[str, Any] | None]], limit: int = TEXT_LIMIT
) -> list[tuple[str, list[dict[str, Any]]]]:
    """Lay out text pieces (plain text, or a mention with its entity minus the offset) in messages of at most
    `limit` UTF-16 units each: a long text is cut at its last line break within the limit, else its last space,
    else where it must be; a mention is never cut. Returns each message's text and its entities (offsets set)."""
    messages: list[tuple[str, list[dict[str, Any]]]] = []
    text, entities, size = "", [], 0

    def close() -> None:
        nonlocal text, entities, size
        if text.strip():
            messages.append((text, entities))
        text, entities, size = "", [], 0

    for piece, entity in pieces:
        if entity is not None:
            length = utf16_len(piece)
            if size + length > limit:
                close()
            entities.append({**entity, "offset": size, "length": length})
            text, size = text + piece, size + length
            continue
        while piece:
            room = limit - size
            length = utf16_len(piece)
            if length <= room:
                text, size = text + piece, size + length
                break
            cut = _cut(piece, room)
            if cut == 0:  # nothing fits in what is left of this message
                close()
                continue
            text += piece[:cut]
            piece = piece[cut:].lstrip(" ") if piece[cut - 1 : cut] != "\n" else piece[cut:]
            close()
    close()
    return messages


def _cut(piece: str, room: int) -> int:
    """How many characters of `piece` to put in `room` UTF-16 units: up to its last line break or space there."""
    fits, units = 0, 0
    for index, char in enumerate(piece):
        units += 2 if ord(char) > 0xFFFF else 1
        if units > room:
            break
        fits = index + 1
    if fits == len(piece):
        return fits
    head = piece[:fits]
    for separator in ("\n", " "):
        at = head.rfind(separator)
        if at > 0:
            return at + 1
    return fits


def to_outgoing(chain: list[BaseMessageElement], *, limit: int = TEXT_LIMIT) -> list[Outgoing]:
    """The sends `chain` takes on Telegram, in order: text and mentions gathered into messages (split at `limit`),
    each media element on its own; a `Reply` quotes with the first send. `At("@name")` is sent as the text
    `@name` (Telegram links it); `At(<numeric id>, name)` as a `text_mention` of that user."""
    sends: list[Outgoing] = []
    pieces: list[tuple[str, dict[str, Any] | None]] = []
    reply_to: int | None = None

    def flush() -> None:
        for text, entities in split_text(pieces, limit):
            sends.append(Outgoing("message", text=text, entities=entities))
        pieces.clear()

    for element in chain:
        if isinstance(element, Text):
            pieces.append((element.text, None))
        elif isinstance(element, At):
            if element.user_id.lstrip("-").isdigit():
                label = element.nickname or element.user_id
                pieces.append(
                    (
                        label,
                        {
                            "type": "text_mention",
                            "user": {"id": int(element.user_id), "is_bot": False, "first_name": label},
                        },
                    )
                )
            else:
                pieces.append((element.user_id if element.user_id.startswith("@") else f"@{element.user_id}", None))
        elif isinstance(element, Reply):
            if element.message_id.isdigit() and reply_to is None:
                reply_to = int(element.message_id)
        elif type(element) in MEDIA_METHODS:
            flush()
            assert isinstance(element, (Image, Sticker, Record, File, Video))
            sends.append(Outgoing(MEDIA_METHODS[type(element)], media=element))
    flush()
    if sends and reply_to is not None:
        sends[0].reply_to = reply_to
    return sends
