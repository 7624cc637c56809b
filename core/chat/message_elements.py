"""Message elements: the typed parts a chat message is made of.

Media elements (`Image`, `Record`, `File`, `Video`, `Sticker`) take a URL, a local path, base64 or a data URL and
convert between them lazily; every conversion that touches the disk runs in a worker thread, never on the loop.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio

__all__ = [
    "BaseMessageElement",
    "Text",
    "Image",
    "At",
    "Reply",
    "Forward",
    "Emoji",
    "Sticker",
    "Record",
    "Notice",
    "Poke",
    "Json",
    "File",
    "Video",
    "MediaError",
]


class MediaError(ValueError):
    """A media element cannot produce the representation asked for (no source, unreadable file, bad base64)."""


class BaseMessageElement:
    """Base of every message element; `repr_text()` is the element as the model and `message_repr` see it."""

    type: ClassVar[str] = "element"

    def repr_text(self) -> str:
        """The element rendered as text for the model and for `event.message_repr`."""
        return f"[{self.type}]"


@dataclass(eq=True)
class Text(BaseMessageElement):
    """Plain text."""

    text: str
    type: ClassVar[str] = "text"

    def repr_text(self) -> str:
        return self.text


@dataclass(eq=True)
class At(BaseMessageElement):
    """A mention of a user (`user_id`), optionally with the display name it had."""

    user_id: str
    nickname: str | None = None
    type: ClassVar[str] = "at"

    def repr_text(self) -> str:
        return f"[At {self.nickname or self.user_id}]" if self.nickname else f"[At {self.user_id}]"


@dataclass(eq=True)
class Reply(BaseMessageElement):
    """A quote of an earlier message, by its platform message id."""

    message_id: str
    type: ClassVar[str] = "reply"

    def repr_text(self) -> str:
        return f"[Reply {self.message_id}]"


@dataclass(eq=True)
class Forward(BaseMessageElement):
    """A bundle of forwarded messages (each a list of elements). `id` is the platform's id of a bundle whose
    messages were not fetched (OneBot delivers a received forward as an id only); empty when `messages` holds it."""

    messages: list[list[BaseMessageElement]] = field(default_factory=list)
    id: str = ""
    type: ClassVar[str] = "forward"

    def repr_text(self) -> str:
        if not self.messages and self.id:
            return f"[Forward {self.id}]"
        inner = " | ".join("".join(e.repr_text() for e in m) for m in self.messages)
        return f"[Forward {inner}]"


@dataclass(eq=True)
class Emoji(BaseMessageElement):
    """A platform emoji, by its platform id."""

    emoji_id: str
    type: ClassVar[str] = "emoji"

    def repr_text(self) -> str:
        return f"[Emoji {self.emoji_id}]"


@dataclass(eq=True)
class Notice(BaseMessageElement):
    """A platform notice (someone joined, a message was recalled...), as text. `kind` names what happened in the
    platform's words (OneBot's `notice_type`, e.g. `group_recall`), empty when unknown, so a plugin can tell
    notices apart without parsing the text."""

    text: str
    kind: str = ""
    type: ClassVar[str] = "notice"

    def repr_text(self) -> str:
        return f"[Notice {self.text}]"


@dataclass(eq=True)
class Poke(BaseMessageElement):
    """A poke / nudge aimed at a user."""

    user_id: str
    type: ClassVar[str] = "poke"

    def repr_text(self) -> str:
        return f"[Poke {self.user_id}]"


@dataclass(eq=True)
class Json(BaseMessageElement):
    """A structured card; `data` is any JSON-serialisable value."""

    data: Any
    type: ClassVar[str] = "json"


@dataclass(eq=True)
class _Media(BaseMessageElement):
    """A piece of media given by exactly one of url, path, base64 or a data URL (`url="data:..."`)."""

    url: str | None = None
    path: str | None = None
    base64: str | None = None
    name: str | None = None
    mime: str | None = None

    def __post_init__(self) -> None:
        if self.path is not None:
            self.path = str(self.path)

    @property
    def source(self) -> str:
        """Where the bytes come from: 'path', 'base64', 'data_url', 'url' or 'none'."""
        if self.path:
            return "path"
        if self.base64:
            return "base64"
        if self.url and self.url.startswith("data:"):
            return "data_url"
        if self.url:
            return "url"
        return "none"

    async def get_bytes(self) -> bytes:
        """The media's bytes; a path is read in a worker thread. URLs are not fetched here (adapters send them)."""
        if self.path:
            try:
                return await anyio.Path(self.path).read_bytes()
            except OSError as exc:
                raise MediaError(f"cannot read {self.type} file {self.path!r}: {exc}") from exc
        if self.base64:
            return _b64decode(self.base64)
        if self.url and self.url.startswith("data:"):
            _, _, payload = self.url.partition(",")
            return _b64decode(payload)
        raise MediaError(f"{self.type} has no local bytes (source: {self.source})")

    async def get_base64(self) -> str:
        """The media as base64 text."""
        if self.base64:
            return self.base64
        return base64.b64encode(await self.get_bytes()).decode("ascii")

    async def get_data_url(self) -> str:
        """The media as a `data:` URL, for model APIs that take inline images."""
        if self.url and self.url.startswith("data:"):
            return self.url
        return f"data:{self.guess_mime()};base64,{await self.get_base64()}"

    def guess_mime(self) -> str:
        """The declared MIME type, else one guessed from the name or path."""
        if self.mime:
            return self.mime
        if self.url and self.url.startswith("data:"):
            return self.url[5:].split(";", 1)[0].split(",", 1)[0] or "application/octet-stream"
        guessed, _ = mimetypes.guess_type(self.name or self.path or self.url or "")
        return guessed or "application/octet-stream"

    def repr_text(self) -> str:
        label = self.name or (Path(self.path).name if self.path else None) or self.source
        return f"[{self.type.capitalize()} {label}]"


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(f"invalid base64 media: {exc}") from exc


@dataclass(eq=True)
class Image(_Media):
    """A picture."""

    type: ClassVar[str] = "image"


@dataclass(eq=True)
class Sticker(_Media):
    """A sticker (an image the platform shows as a sticker)."""

    type: ClassVar[str] = "sticker"


@dataclass(eq=True)
class Record(_Media):
    """A voice recording."""

    type: ClassVar[str] = "record"


@dataclass(eq=True)
class File(_Media):
    """A file attachment."""

    type: ClassVar[str] = "file"


@dataclass(eq=True)
class Video(_Media):
    """A video."""

    type: ClassVar[str] = "video"
