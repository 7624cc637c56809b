"""Finding the methods of a plugin class that carry a declaration marker (hooks, tools, tags, entries, timers)."""

from __future__ import annotations

import inspect
from typing import Any

__all__ = ["declared"]


#: The attribute each scanned class keeps its scan in. On the class itself, not in a `WeakKeyDictionary` keyed by
#: it: the scan refers to the class's functions, whose globals refer to the class, so such a value kept its key
#: alive, and an unloaded or reloaded plugin's module stayed in memory for good.
_SCAN = "_hookchat_functions"


def _functions_of(cls: type) -> list[tuple[int, str, Any]]:
    """`(source line, name, function)` of every function `cls` defines or inherits, scanned once per class."""
    found = cls.__dict__.get(_SCAN)
    if found is None:
        seen: dict[str, Any] = {}
        for klass in cls.__mro__:
            for name, value in vars(klass).items():
                seen.setdefault(name, getattr(value, "__func__", value))
        found = sorted(
            (getattr(getattr(inspect.unwrap(fn), "__code__", None), "co_firstlineno", 0), name, fn)
            for name, fn in seen.items()
            if inspect.isfunction(fn)
        )
        try:
            setattr(cls, _SCAN, found)
        except (AttributeError, TypeError):  # a built-in or extension type: scanned each time
            pass
    return found


def declared(instance: Any, attr: str) -> list[tuple[str, Any]]:
    """`(attribute name, function)` of every method of `instance`'s class carrying the marker `attr`, in source
    order. The class is scanned once; this is how hooks, tools, tags, entries and timers are found."""
    cls = instance if isinstance(instance, type) else type(instance)
    return [(name, fn) for _, name, fn in _functions_of(cls) if getattr(fn, attr, None) is not None]
