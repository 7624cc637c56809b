"""The CQ-code string form of a OneBot v11 message (`text[CQ:face,id=1]more`) and its escapes, both ways.

A segment is the array form's `{"type": ..., "data": {...}}`; `parse_cq` and `to_cq` convert between a string and
a list of them without losing anything the string can express.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["escape", "unescape", "parse_cq", "to_cq"]

# The spec's rule: the type runs from `[CQ:` to the first `,` or `]`; then `,`-separated `key=value` parameters
# whose values may hold anything but `,` and `]` (those arrive escaped). A `[CQ:` that does not match stays text.
_CQ = re.compile(r"\[CQ:([A-Za-z0-9_.\-]+)((?:,[A-Za-z0-9_.\-]+=[^,\]]*)*),?\]")
_ENTITY = re.compile(r"&(amp|#91|#93|#44);")
_UNESCAPED = {"amp": "&", "#91": "[", "#93": "]", "#44": ","}


def escape(text: str, *, comma: bool = False) -> str:
    """Escape `&`, `[` and `]` (and `,` with `comma=True`, as inside a CQ code's parameter value)."""
    text = text.replace("&", "&amp;").replace("[", "&#91;").replace("]", "&#93;")
    return text.replace(",", "&#44;") if comma else text


def unescape(text: str) -> str:
    """Undo `escape` in one pass, so `&amp;#91;` becomes the text `&#91;`, not `[`."""
    return _ENTITY.sub(lambda m: _UNESCAPED[m.group(1)], text)


def parse_cq(message: str) -> list[dict[str, Any]]:
    """The segments of a CQ-code string: text between codes becomes `text` segments (empty text is dropped)."""
    segments: list[dict[str, Any]] = []
    position = 0
    for match in _CQ.finditer(message):
        if match.start() > position:
            segments.append({"type": "text", "data": {"text": unescape(message[position : match.start()])}})
        data: dict[str, Any] = {}
        for pair in match.group(2).split(",")[1:]:
            key, _, value = pair.partition("=")
            data[key] = unescape(value)
        segments.append({"type": match.group(1), "data": data})
        position = match.end()
    if position < len(message):
        segments.append({"type": "text", "data": {"text": unescape(message[position:])}})
    return segments


def to_cq(segments: list[dict[str, Any]]) -> str:
    """The CQ-code string of `segments`; parameter values that are not strings are written with `str()`."""
    parts = []
    for segment in segments:
        kind, data = segment["type"], segment.get("data") or {}
        if kind == "text":
            parts.append(escape(str(data.get("text", ""))))
            continue
        params = "".join(
            f",{key}={escape(_value_text(value), comma=True)}" for key, value in data.items() if value is not None
        )
        parts.append(f"[CQ:{kind}{params}]")
    return "".join(parts)


def _value_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, dict)):
        # A node's `content` may be an array; inside a string it can only be written as its CQ-code string.
        return to_cq(value) if isinstance(value, list) else str(value)
    return str(value)
