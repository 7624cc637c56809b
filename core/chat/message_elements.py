"""Message elements: the typed parts a chat message is made of.

Media elements (`Image`, `Record`, `File`, `Video`, `Sticker`) take a URL, a local path, base64 or a data URL and
convert between them lazily; every conversion that touches the disk runs in a worker thread, never on the loop.
KiraAI's names work too: `At.pid`, `Poke.pid`, `Image(image=...)` (any of the four, told apart by its form),
`Image.caption` and `await media.to_path()`.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import mimetypes
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import anyio

from core.utils.path_utils import get_data_path

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
    "ELEMENT_TYPES",
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


@dataclass(eq=True, init=False)  # its own __init__, as Image's
class At(BaseMessageElement):
    """A mention of a user (`user_id`, or `pid` as KiraAI calls it; "all" mentions everyone), optionally with the
    display name it had."""

    user_id: str
    nickname: str | None = None
    type: ClassVar[str] = "at"

    def __init__(
        self, user_id: str | int | None = None, nickname: str | None = None, *, pid: str | int | None = None
    ) -> None:
        if (user_id is None) == (pid is None):
            raise TypeError("At needs the user's id: At(user_id) or At(pid=...)")
        self.user_id = str(user_id if user_id is not None else pid)
        self.nickname = nickname

    @property
    def pid(self) -> str:
        """KiraAI's name for `user_id`."""
        return self.user_id

    @pid.setter
    def pid(self, value: str | int) -> None:
        self.user_id = str(value)

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


@dataclass(eq=True, init=False)  # its own __init__, as Image's
class Poke(BaseMessageElement):
    """A poke / nudge aimed at a user (`user_id`, or `pid` as KiraAI calls it)."""

    user_id: str
    type: ClassVar[str] = "poke"

    def __init__(self, user_id: str | int | None = None, *, pid: str | int | None = None) -> None:
        if (user_id is None) == (pid is None):
            raise TypeError("Poke needs the user's id: Poke(user_id) or Poke(pid=...)")
        self.user_id = str(user_id if user_id is not None else pid)

    @property
    def pid(self) -> str:
        """KiraAI's name for `user_id`."""
        return self.user_id

    @pid.setter
    def pid(self, value: str | int) -> None:
        self.user_id = str(value)

    def repr_text(self) -> str:
        return f"[Poke {self.user_id}]"


@dataclass(eq=True)
class Json(BaseMessageElement):
    """A structured card; `data` is any JSON-serialisable value."""

    data: Any
    type: ClassVar[str] = "json"


@dataclass(eq=True)
class _Media(BaseMessageElement):
    """A piece of media given by exactly one of url, path, base64 or a data URL (`url="data:..."`).

    A kind that adds no field (`Sticker`, `Record`, `File`, `Video`) is a plain subclass: it inherits the generated
    `__init__`, `__repr__` (which names the kind) and `__eq__` (which compares kinds too), so it need not generate
    them again at every start-up."""

    url: str | None = None
    path: str | None = None
    base64: str | None = None
    name: str | None = None
    mime: str | None = None

    _temp_path: str | None = field(default=None, init=False, repr=False, compare=False)

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

    async def to_path(self) -> str:
        """A local file holding the media, as an absolute path (KiraAI's `to_path`).

        A path is returned as is (made absolute); base64 and data URLs are written once to `<data>/temp/`; an
        http(s) URL is downloaded there once. The file name is derived from the content, so asking twice (or for
        two elements with the same bytes) gives the same file. Raises `MediaError` when there is nothing to write
        or the download fails.
        """
        if self.path:
            return os.path.abspath(self.path)  # noqa: ASYNC240 - string work and one getcwd, no disk access
        if self._temp_path is not None:
            return self._temp_path
        if self.url and not self.url.startswith("data:"):
            data = await _download(self.url, self.type)
        else:
            data = await self.get_bytes()
        target = get_data_path() / "temp" / f"{hashlib.sha256(data).hexdigest()[:32]}{self._suffix()}"

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            if not target.exists():
                partial = target.with_name(target.name + ".part")
                partial.write_bytes(data)
                partial.replace(target)

        await anyio.to_thread.run_sync(write)
        self._temp_path = str(target)
        return self._temp_path

    def _suffix(self) -> str:
        for candidate in (self.name, self.url if self.url and not self.url.startswith("data:") else None):
            if candidate:
                suffix = Path(candidate.split("?", 1)[0]).suffix
                if 0 < len(suffix) <= 8:
                    return suffix
        return mimetypes.guess_extension(self.guess_mime()) or ""

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


async def _download(url: str, kind: str) -> bytes:
    import httpx  # imported on first download: every plugin imports this module, few download media

    try:
        async with httpx.AsyncClient(follow_redirects=True, timeout=30.0) as client:
            response = await client.get(url)
            response.raise_for_status()
            return response.content
    except httpx.HTTPError as exc:
        raise MediaError(f"cannot download {kind} {url!r}: {exc}") from exc


def _source_of(value: str) -> dict[str, str]:
    """KiraAI's one-string media source told apart by its form alone (no disk access on the event loop)."""
    if value.startswith(("http://", "https://", "data:")):
        return {"url": value}
    if value.startswith("file://"):
        return {"path": value.removeprefix("file://")}
    if value.startswith("base64://"):
        return {"base64": value.removeprefix("base64://")}
    looks_like_path = value.startswith((".", "~")) or os.sep in value or "\\" in value or Path(value).suffix != ""
    if not looks_like_path and len(value) % 4 == 0:
        try:
            base64.b64decode(value, validate=True)
            return {"base64": value}
        except (binascii.Error, ValueError):
            pass
    return {"path": value}


def _b64decode(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise MediaError(f"invalid base64 media: {exc}") from exc


@dataclass(eq=True, init=False)
class Image(_Media):
    """A picture, from `url`, `path` or `base64` (or KiraAI's `Image(image=...)`, any of the four told apart by its
    form: `http(s)://` and `data:` are URLs, `base64://` and bare base64 text are base64, anything else a path).
    `caption` is a description of the picture (for example one a vision model wrote)."""

    caption: str | None = None
    type: ClassVar[str] = "image"

    def __init__(
        self,
        url: str | None = None,
        path: str | None = None,
        base64: str | None = None,
        name: str | None = None,
        mime: str | None = None,
        caption: str | None = None,
        *,
        image: str | None = None,
    ) -> None:
        if image is not None:
            if url is not None or path is not None or base64 is not None:
                raise TypeError("give the picture once: image=..., or one of url/path/base64")
            source = _source_of(str(image))
            url, path, base64 = source.get("url"), source.get("path"), source.get("base64")
        self.url, self.path, self.base64, self.name, self.mime = url, path, base64, name, mime
        self.caption = caption
        self._temp_path = None
        self.__post_init__()

    @property
    def image(self) -> str:
        """The picture's source as one string, as KiraAI's `Image.image` holds it."""
        return self.url or self.path or self.base64 or ""


class Sticker(_Media):
    """A sticker (an image the platform shows as a sticker)."""

    type: ClassVar[str] = "sticker"


class Record(_Media):
    """A voice recording."""

    type: ClassVar[str] = "record"


class File(_Media):
    """A file attachment."""

    type: ClassVar[str] = "file"


class Video(_Media):
    """A video."""

    type: ClassVar[str] = "video"


#: The type name of every element kind (`element.type`), e.g. for KiraAI's `event.message_types`.
ELEMENT_TYPES: tuple[str, ...] = tuple(
    cls.type for cls in (Text, Image, At, Reply, Forward, Emoji, Sticker, Record, Notice, Poke, Json, File, Video)
)
