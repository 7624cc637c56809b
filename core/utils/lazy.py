"""Names a package exports but imports on first use (PEP 562), so importing the package does not run the modules
only some commands need: `hookchat plugins` would otherwise import what only a turn, the web console or a KiraAI
plugin uses (docs/performance.md). A package declares them beside its eager imports:

    __getattr__ = lazy_names(__name__, dict.fromkeys(("StreamParser", "parse_output"), "core.tag._parser"))

    if TYPE_CHECKING:  # what the checker sees of the lazy names
        from core.tag._parser import StreamParser, parse_output
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["lazy_names"]


def lazy_names(package: str, modules: Mapping[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: each name of `modules` is imported from the module it maps to when it
    is first read, then kept in the package like an eager import; any other name is an `AttributeError`."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)
        return value

    return __getattr__
