"""The methods `@dataclass` generates, compiled once and kept beside hookchat's bytecode for the next command.

`@dataclass` writes each method it adds to a class (`__init__`, `__repr__`, `__eq__`, ...) as source text and `exec`s
it, so every process parses and compiles them again: some 480 methods in `hookchat plugins` (the framework's
dataclasses, pydantic's and annotated-types'), a tenth of the whole process (docs/performance.md). While
`reused_dataclass_code()` is open, `dataclasses` runs each text's code object as compiled by an earlier command,
read from a file beside this module's bytecode, and the texts compiled anew are added to that file at the end, as
Python writes a module's bytecode (not with `PYTHONDONTWRITEBYTECODE`, nor where it cannot write). The code is what
`exec` would compile from the same text: each entry is keyed on the whole text, and the file on the interpreter's
bytecode version, so a class that changes is a new entry and nothing stale is ever run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

__all__ = ["MAX_ENTRIES", "reused_dataclass_code"]

#: Past this many methods in the file, it keeps only those the last command used (plugins come and go).
MAX_ENTRIES = 4000

_UNSET = object()


def _file() -> Path | None:
    """The cache file beside this module's bytecode (`__pycache__`, or under `sys.pycache_prefix`), or None."""
    try:
        return Path(importlib.util.cache_from_source(__file__)).with_suffix(".dataclasses")
    except NotImplementedError:  # no bytecode cache on this interpreter (sys.implementation.cache_tag is None)
        return None


def _read(path: Path) -> dict[str, CodeType]:
    """The code objects in `path` by their source text; empty when it is missing, unreadable or of another Python."""
    try:
        magic, codes = marshal.loads(path.read_bytes())  # not marshal.load(file): it reads object by object
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if magic != importlib.util.MAGIC_NUMBER or not isinstance(codes, dict):
        return {}
    return codes


def _write(path: Path, codes: Mapping[str, CodeType]) -> None:
    """Replace `path` with `codes` at once (a command reading it meanwhile sees the old file or the new one)."""
    partial = path.with_name(f"{path.name}.{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial.write_bytes(marshal.dumps((importlib.util.MAGIC_NUMBER, dict(codes))))
        partial.replace(path)
    except OSError:  # a read-only installation: the next command compiles them again
        with contextlib.suppress(OSError):
            partial.unlink()


@contextlib.contextmanager
def reused_dataclass_code() -> Iterator[None]:
    """Within the block, `@dataclass` reuses the methods it compiled in earlier commands; those it compiles anew
    are kept for the next one when the block ends (see the module's docstring)."""
    path = _file()
    known = _read(path) if path is not None else {}
    used: dict[str, CodeType] = {}
    compiled = False

    def exec_known(source: Any, globals: Any = None, locals: Any = None, /) -> None:
        nonlocal compiled
        if globals is None:  # exec's own default: the globals of its caller, dataclasses
            globals = dataclasses.__dict__
        if not isinstance(source, str):
            exec(source, globals, locals)
            return
        code = used.get(source) or known.get(source)
        if code is None:
            # As `exec(source)` in dataclasses compiles it: no `from __future__` flags inherited from this module.
            code = compile(source, "<string>", "exec", dont_inherit=True)
            compiled = True
        used[source] = code
        exec(code, globals, locals)

    # A module global named `exec` comes before the builtin for the code of `dataclasses` alone.
    before = vars(dataclasses).get("exec", _UNSET)
    dataclasses.exec = exec_known  # type: ignore[attr-defined] - shadows the builtin in dataclasses' namespace
    try:
        yield
    finally:
        if before is _UNSET:
            del dataclasses.exec  # type: ignore[attr-defined] - the shadow set above
        else:
            dataclasses.exec = before  # type: ignore[attr-defined] - an enclosing block's shadow
        if compiled and path is not None and not sys.dont_write_bytecode:
            _write(path, used if len(known) + len(used) > MAX_ENTRIES else {**known, **used})
