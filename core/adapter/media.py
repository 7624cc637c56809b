"""Media elements as the platform adapters handle them, the same on every platform: the element types a file can
be, the name a file is uploaded under, and the suffix a downloaded file is kept with."""

from __future__ import annotations

import mimetypes
import re
from pathlib import Path

from core.chat.message_elements import File, Image, Record, Sticker, Video

__all__ = ["MediaElement", "upload_name", "file_suffix"]

#: An element that is a file: what a platform adapter uploads and downloads.
MediaElement = Image | Sticker | Record | File | Video

_SUFFIX = re.compile(r"\.[A-Za-z0-9]{1,8}")


def upload_name(media: MediaElement) -> str:
    """The file name `media` is uploaded under: its `name`, else its path's last part, else its type with the
    extension of its MIME type (`image.png`)."""
    if media.name:
        return media.name
    if media.path:
        return Path(media.path).name
    return f"{media.type}{mimetypes.guess_extension(media.guess_mime()) or ''}"


def file_suffix(name: str | None, mime: str | None) -> str:
    """The suffix to keep a received file with: the one of `name` when it is short and alphanumeric (`.jpg`), else
    the extension of `mime` (parameters such as `; charset=` ignored), else none; so no name a sender chooses puts
    anything but a plain suffix in a path."""
    suffix = Path(name).suffix if name else ""
    if _SUFFIX.fullmatch(suffix):
        return suffix
    return mimetypes.guess_extension((mime or "").split(";")[0].strip()) or ""
