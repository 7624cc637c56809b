"""Text made valid at hookchat's boundaries: whatever a platform, a model or a plugin hands over, what is stored,
sent and printed is valid Unicode, so no `UnicodeEncodeError` ends a turn, a history insert or the console."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

__all__ = ["json_encoder", "valid_text"]

# A surrogate code point: valid only as half of a pair, and a Python str may hold one alone (a JSON `\ud83d`
# escape, an emoji cut in two by a stream), which no UTF encoder accepts.
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with each surrogate pair joined into its character and each lone surrogate replaced by U+FFFD, so it
    can be encoded (stored, sent, printed); the same object when there is nothing to replace."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def json_encoder(
    separators: tuple[str, str] = (", ", ": "), default: Callable[[Any], Any] | None = None
) -> Callable[[Any], str]:
    """`json.dumps(value, ensure_ascii=False, separators=separators, default=default)` as a function whose C encoder is
    made once, for plain data encoded on a hot path. `json.dumps` makes a `JSONEncoder` at every call given an
    argument of its own, and a C encoder with a table of the containers it encodes (its check for circular
    references) at every call: 1 to 3.5 us, as long as encoding a small value. Without that check, a value that
    contains itself raises `RecursionError` (`ValueError` from `json.dumps`)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # a Python without the C accelerator
        return json.JSONEncoder(ensure_ascii=False, separators=separators, default=default).encode
    item, key = separators
    fallback = default if default is not None else json.JSONEncoder().default  # which raises `TypeError`
    encode = make(None, fallback, json.encoder.encode_basestring, None, key, item, False, False, True)
    return lambda value: "".join(encode(value, 0))
