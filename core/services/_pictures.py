"""The size budget of pictures a tool returns: up to 2 MiB of inline base64 is accepted; a picture over the
delivery budget (500 KiB of base64) is re-encoded as JPEG of at most 1280x720 in a worker thread, and the model is
told; one that still does not fit is dropped with a warning.
"""

from __future__ import annotations

import base64
import io
import math
from pathlib import Path
from typing import Any

import anyio

from core.chat.message_elements import Image, MediaError
from core.utils.log import get_logger

__all__ = [
    "apply_picture_budget",
    "reencode_picture",
    "PICTURE_BUDGET",
    "MAX_INLINE_PICTURE",
    "MAX_PICTURE_FILE",
    "REENCODE_SIZE",
    "REENCODE_QUALITY",
]

logger = get_logger("services.pictures")

#: Delivery budget of one picture, in bytes of base64.
PICTURE_BUDGET = 500 * 1024
#: Largest inline (base64 or data URL) picture a tool may return, in bytes of base64.
MAX_INLINE_PICTURE = 2 * 1024 * 1024
#: Largest picture file (`Image(path=...)`) that is decoded for re-encoding, in bytes.
MAX_PICTURE_FILE = 32 * 1024 * 1024
#: The re-encoding profile: JPEG, fitting inside this box, at this quality.
REENCODE_SIZE = (1280, 720)
REENCODE_QUALITY = 85


def _b64_len(raw_len: int) -> int:
    return 4 * math.ceil(raw_len / 3)


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB"


def reencode_picture(data: bytes) -> tuple[bytes, tuple[int, int]]:
    """Re-encode picture bytes as JPEG within 1280x720 (alpha flattened onto white); returns bytes and size.

    Blocking (Pillow): call it in a worker thread. Raises `OSError`/`ValueError` for data Pillow cannot decode.
    """
    # Pillow is imported by the first picture over budget, not by every plugin that imports core.plugin.
    from PIL import Image as PILImage
    from PIL import ImageOps

    with PILImage.open(io.BytesIO(data)) as opened:
        opened.draft("RGB", REENCODE_SIZE)  # JPEG only: decode at a reduced scale when that is enough
        picture = ImageOps.exif_transpose(opened)
        picture.thumbnail(REENCODE_SIZE)
        if picture.mode in ("RGBA", "LA", "P", "PA"):
            picture = picture.convert("RGBA")
            flat = PILImage.new("RGB", picture.size, (255, 255, 255))
            flat.paste(picture, mask=picture.getchannel("A"))
            picture = flat
        elif picture.mode not in ("RGB", "L"):
            picture = picture.convert("RGB")
        out = io.BytesIO()
        picture.save(out, "JPEG", quality=REENCODE_QUALITY, optimize=True)
        return out.getvalue(), picture.size


async def _inline_size(image: Image) -> int | None:
    if image.base64:
        return len(image.base64.strip())
    if image.url and image.url.startswith("data:"):
        return len(image.url.partition(",")[2].strip())
    return None


async def apply_picture_budget(result: Any, budget: int = PICTURE_BUDGET) -> Any:
    """Bring every `Image` attachment of a tool's `ToolResult` within `budget` (bytes of base64); returns `result`.

    A picture within the budget, or given by URL (not fetched here), is left alone. An inline picture over 2 MiB,
    a file over 32 MiB, or a picture that cannot be read or decoded is dropped. One over the budget is replaced by
    its JPEG re-encoding when that fits, else dropped. Each change appends a note to `result.text`, so the model
    knows; each drop is logged as a warning. The attachments list is edited in place.
    """
    attachments = list(getattr(result, "attachments", None) or ())
    if not any(isinstance(a, Image) for a in attachments):
        return result
    kept: list[Any] = []
    notes: list[str] = []
    tool = getattr(result, "tool_name", "") or "tool"
    for item in attachments:
        if not isinstance(item, Image):
            kept.append(item)
            continue
        replacement, note = await _fit(item, budget, tool)
        if replacement is not None:
            kept.append(replacement)
        if note:
            notes.append(note)
    result.attachments[:] = kept
    if notes:
        result.text = "\n".join([result.text, *notes]) if result.text else "\n".join(notes)
    return result


async def _fit(image: Image, budget: int, tool: str) -> tuple[Image | None, str]:
    label = image.name or (Path(image.path).name if image.path else "") or "returned by the tool"
    label = f"picture {label!r}" if label != "returned by the tool" else "the picture returned by the tool"

    def drop(reason: str) -> tuple[None, str]:
        logger.warning("tool %s: %s dropped: %s", tool, label, reason)
        return None, f"[note: {label} was dropped: {reason}]"

    inline = await _inline_size(image)
    if inline is not None:
        if inline <= budget:
            return image, ""
        if inline > MAX_INLINE_PICTURE:
            return drop(f"{_kib(inline)} of base64 is over the {_kib(MAX_INLINE_PICTURE)} a tool may return")
        size = inline
    elif image.path:
        try:
            file_size = (await anyio.Path(image.path).stat()).st_size
        except OSError as exc:
            return drop(f"its file cannot be read ({exc.strerror or exc})")
        size = _b64_len(file_size)
        if size <= budget:
            return image, ""
        if file_size > MAX_PICTURE_FILE:
            return drop(f"its file of {_kib(file_size)} is over the {_kib(MAX_PICTURE_FILE)} that can be re-encoded")
    else:  # a URL: nothing local to measure
        return image, ""
    try:
        data = await image.get_bytes()
    except MediaError as exc:
        return drop(str(exc))
    try:
        jpeg, (width, height) = await anyio.to_thread.run_sync(reencode_picture, data)
    except Exception as exc:
        return drop(f"it is over the {_kib(budget)} delivery budget and could not be decoded ({type(exc).__name__})")
    encoded = base64.b64encode(jpeg).decode("ascii")
    if len(encoded) > budget:
        return drop(
            f"it is over the {_kib(budget)} delivery budget even after re-encoding as JPEG at "
            f"{width}x{height} ({_kib(len(encoded))})"
        )
    stem = Path(image.name).stem if image.name else (Path(image.path).stem if image.path else "picture")
    replacement = Image(base64=encoded, name=f"{stem}.jpg", mime="image/jpeg")
    logger.info("tool %s: %s re-encoded from %s to %s", tool, label, _kib(size), _kib(len(encoded)))
    return replacement, (
        f"[note: {label} ({_kib(size)}) was over the {_kib(budget)} delivery budget, so it was "
        f"re-encoded as JPEG at {width}x{height} ({_kib(len(encoded))}); details may be lost]"
    )
