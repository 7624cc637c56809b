"""Finding the methods of a plugin class that carry a declaration marker (hooks, tools, tags, entries, timers)."""

from __future__ import annotations

import inspect
import weakref
from typing import Any

__all__ = ["declared"]


_class_functions: weakref.WeakKeyDictionary[type, list[tuple[int, str, Any]]] = weakref.WeakKeyDictionary()


def _functions_of(cls: type) -> list[tuple[int, str, Any]]:
    """`(source line, name, function)` of every function `cls` defines or inherits, scanned once per class."""
    found = _class_functions.get(cls)
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
        _class_functions[cls] = found
    return found


def declared(instance: Any, attr: str) -> list[tuple[str, Any]]:
    """`(attribute name, function)` of every method of `instance`'s class carrying the marker `attr`, in source
    order. The class is scanned once; this is how hooks, tools, tags, entries and timers are found."""
    cls = instance if isinstance(instance, type) else type(instance)
    return [(name, fn) for _, name, fn in _functions_of(cls) if getattr(fn, attr, None) is not None]
