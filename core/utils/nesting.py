"""JSON from peers, parsed with a bound on how deeply it nests: past a few hundred levels `json.loads` raises
`RecursionError` (not a `ValueError`), and every later recursive walk of the value (validation, `json.dumps` into
a trace or the history) would too. The registry's request bodies and OneBot frames both come in this way."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["NestingError", "loads_bounded", "nesting_depth"]


class NestingError(ValueError):
    """JSON nested more deeply than its reader accepts."""


def nesting_depth(value: Any) -> int:
    """How deeply `value` nests (a scalar is 0, `[]` is 1), without recursion."""
    deepest, stack = 0, [(value, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict | list):
            level += 1
            deepest = max(deepest, level)
            stack.extend((child, level) for child in (node.values() if isinstance(node, dict) else node))
    return deepest


def loads_bounded(raw: str | bytes, max_depth: int) -> Any:
    """`json.loads(raw)`, refusing with `NestingError` a document nested more than `max_depth` levels.

    Other malformed JSON raises `ValueError` as `json.loads` does. The depth is measured only when the document
    has more than `max_depth` opening brackets (it cannot nest deeper than that), so an ordinary frame pays one
    count of its brackets."""
    try:
        value = json.loads(raw)
    except RecursionError:
        raise NestingError(f"nested more than {max_depth} levels deep") from None
    brackets = raw.count(b"[") + raw.count(b"{") if isinstance(raw, bytes) else raw.count("[") + raw.count("{")
    if brackets > max_depth and nesting_depth(value) > max_depth:
        raise NestingError(f"nested more than {max_depth} levels deep")
    return value
