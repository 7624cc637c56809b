"""Code the standard library compiles from text at run time, compiled once and kept beside hookchat's bytecode.

`@dataclass` writes each method it adds to a class (`__init__`, `__repr__`, `__eq__`, ...) as source text and `exec`s
it, and `typing.ForwardRef` compiles each annotation written as a string (pydantic-core's schema types alone have
some 700), so every process parsed and compiled them all again: some 440 methods and 890 annotations, a quarter of
`hookchat plugins` (docs/performance.md). While `reused_compiled_code(command)` is open, `dataclasses` and `typing`
run the code objects an earlier run of the command compiled from the same texts, read from a file beside this
module's bytecode; the texts compiled anew are added to that file at the end, as Python writes a module's bytecode
(not with `PYTHONDONTWRITEBYTECODE`, nor where it cannot write). The code is what the builtin would compile from the
same text: each entry is keyed on the whole text and the mode, and the file on the interpreter's bytecode version,
so a class that changes is a new entry and nothing stale is ever run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import marshal
import os
import sys
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import CodeType
from typing import Any

__all__ = ["MAX_ENTRIES", "reused_compiled_code"]

#: Past this many texts in a file, it keeps only those the last command used (plugins come and go).
MAX_ENTRIES = 8000

_UNSET = object()

#: A text and the mode it is compiled in (`exec` for dataclasses' methods, `eval` for typing's annotations).
_Key = tuple[str, str]


def _file(name: str) -> Path | None:
    """The cache file `name` beside this module's bytecode (`__pycache__`, or under `sys.pycache_prefix`), or None."""
    try:
        return Path(importlib.util.cache_from_source(__file__)).with_suffix(f".{name}.code")
    except NotImplementedError:  # no bytecode cache on this interpreter (sys.implementation.cache_tag is None)
        return None


def _read(path: Path) -> dict[_Key, CodeType]:
    """The code objects in `path` by text and mode; empty when it is missing, unreadable or of another Python."""
    try:
        magic, codes = marshal.loads(path.read_bytes())  # not marshal.load(file): it reads object by object
    except (OSError, EOFError, ValueError, TypeError):
        return {}
    if magic != importlib.util.MAGIC_NUMBER or not isinstance(codes, dict):
        return {}
    return codes


def _write(path: Path, codes: Mapping[_Key, CodeType]) -> None:
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
def reused_compiled_code(name: str) -> Iterator[None]:
    """Within the block, `dataclasses` and `typing` reuse the code they compiled in earlier blocks of this `name`
    (a command: each reads only what it uses); what they compile anew is kept for the next one when the block ends
    (see the module's docstring)."""
    path = _file(name)
    known = _read(path) if path is not None else {}
    used: dict[_Key, CodeType] = {}
    compiled = False

    def code(source: str, mode: str) -> CodeType:
        nonlocal compiled
        key = (source, mode)
        found = used.get(key) or known.get(key)
        if found is None:
            # As the builtin compiles it in `dataclasses` and `typing`: no `from __future__` flag of this module.
            found = compile(source, "<string>", mode, dont_inherit=True)
            compiled = True
        used[key] = found
        return found

    def exec_known(source: Any, globals: Any = None, locals: Any = None, /) -> None:
        """`exec` as `dataclasses` calls it: `exec(text, globals, namespace)`."""
        if globals is None:  # exec's own default: the globals of its caller, dataclasses
            globals = dataclasses.__dict__
        exec(code(source, "exec") if isinstance(source, str) else source, globals, locals)

    def compile_known(
        source: Any, filename: Any, mode: Any, flags: int = 0, dont_inherit: bool = False, optimize: int = -1
    ) -> Any:
        """`compile` as `typing.ForwardRef` calls it: `compile(text, "<string>", "eval")`."""
        if isinstance(source, str) and filename == "<string>" and mode == "eval" and not flags and optimize == -1:
            return code(source, mode)
        # `typing` has no `from __future__` flag to inherit: neither may this module's be.
        return compile(source, filename, mode, flags, True, optimize)

    # A module global named like a builtin comes before the builtin, for that module's own code alone.
    shadows = ((dataclasses, "exec", exec_known), (typing, "compile", compile_known))
    before = [vars(module).get(name, _UNSET) for module, name, _ in shadows]
    for module, name, shadow in shadows:
        setattr(module, name, shadow)
    try:
        yield
    finally:
        for (module, name, _), previous in zip(shadows, before, strict=True):
            if previous is _UNSET:
                delattr(module, name)
            else:  # an enclosing block's shadow
                setattr(module, name, previous)
        if compiled and path is not None and not sys.dont_write_bytecode:
            _write(path, used if len(known) + len(used) > MAX_ENTRIES else {**known, **used})
