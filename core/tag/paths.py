"""Which local files output tags (`<file>`, `<img>`, `<record>`) may send. The model's output is untrusted: a path
it names is allowed only when, with `..` and symlinks resolved, it is a regular file inside a directory the operator
allows and not inside hookchat's own private paths (its data directory, config file), or when it names an
attachment a tool returned this turn."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from urllib.parse import unquote, urlsplit

import anyio

from core.chat import BaseMessageElement

__all__ = ["MediaPathError", "check_media_path", "resolve_media_path", "find_attachment"]

_URL_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")


class MediaPathError(PermissionError):
    """A tag named a file it may not send; the message is the reason (logged, never shown to the user)."""


def check_media_path(
    value: str, roots: Iterable[str | os.PathLike[str]], private: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """The real path of the file `value` names, if it lies inside one of `roots` and is not (inside) one of
    `private`; else raise `MediaPathError`. `private` (the data directory with history and plugin stores, the
    config file) wins over `roots`, so a root that contains the data directory still never sends its files.

    `value` is an absolute path, a path relative to a root (tried under each root in order) or a `file://` URL.
    Both the roots and the candidate are resolved (symlinks followed, `..` removed) before the containment check,
    and only regular files pass. This does file-system I/O: on the event loop use `resolve_media_path`.
    """
    text = str(value).strip()
    if not text:
        raise MediaPathError("no path given")
    if "\x00" in text:
        raise MediaPathError("the path contains a NUL character")
    if text[:5].lower() == "file:":
        url = urlsplit(text)
        if url.netloc not in ("", "localhost"):
            raise MediaPathError(f"{text!r} points to another host")
        text = unquote(url.path)
    elif _URL_SCHEME.match(text):
        raise MediaPathError(f"{text!r} is a URL, not a local file")
    real_roots: list[Path] = []
    for root in roots:
        try:
            real_roots.append(Path(root).resolve(strict=True))
        except (OSError, RuntimeError):
            continue
    if not real_roots:
        raise MediaPathError("no allowed media directory exists (configure the media roots)")
    real_private = [Path(p).resolve() for p in private]
    path = Path(text)
    candidates = [path] if path.is_absolute() else [root / path for root in real_roots]
    reason = f"{text!r} does not exist in an allowed media directory"
    for candidate in candidates:
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError):  # missing, or a symlink loop
            continue
        if not any(real.is_relative_to(root) for root in real_roots):
            reason = f"{text!r} resolves to {str(real)!r}, outside the allowed media directories"
            continue
        if any(real.is_relative_to(p) for p in real_private):
            reason = f"{text!r} resolves to {str(real)!r}, which is hookchat's private data: it is never sent"
            continue
        if not real.is_file():
            reason = f"{text!r} is not a regular file"
            continue
        return real
    raise MediaPathError(reason)


async def resolve_media_path(
    value: str, roots: Iterable[str | os.PathLike[str]], private: Iterable[str | os.PathLike[str]] = ()
) -> Path:
    """`check_media_path` run in a worker thread, so the event loop never blocks on the file system."""
    return await anyio.to_thread.run_sync(check_media_path, value, list(roots), list(private))


def find_attachment(value: str, attachments: Sequence[BaseMessageElement]) -> BaseMessageElement | None:
    """The attachment (an `Image`, `Record` or `File` a tool returned) that `value` names, or None.

    It matches the attachment's path (also after normalisation), its file name, its `name` or its URL. No I/O.
    """
    text = str(value).strip()
    if not text:
        return None
    for attachment in attachments:
        path = getattr(attachment, "path", None)
        if text in (path, getattr(attachment, "name", None), getattr(attachment, "url", None)):
            return attachment
        if path and (os.path.normpath(text) == os.path.normpath(path) or text == os.path.basename(path)):
            return attachment
    return None
