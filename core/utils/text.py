"""Text made valid at hookchat's boundaries: whatever a platform, a model or a plugin hands over, what is stored,
sent and printed is valid Unicode, so no `UnicodeEncodeError` ends a turn, a history insert or the console."""

from __future__ import annotations

import re

__all__ = ["valid_text"]

# A surrogate code point: valid only as half of a pair, and a Python str may hold one alone (a JSON `\ud83d`
# escape, an emoji cut in two by a stream), which no UTF encoder accepts.
_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with each surrogate pair joined into its character and each lone surrogate replaced by U+FFFD, so it
    can be encoded (stored, sent, printed); the same object when there is nothing to replace."""
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
