"""The JSON-lines trace file's writer: renders the plain data the event loop made of each finished trace
(`Trace.compact`) as a line and appends it, rotating the file at `max_bytes`. It runs in a process of its own
(`core.trace._child`, fed by `JsonLinesSink` over its stdin), or in the sink's thread when
that process cannot run.

The pipe carries batches of frames, each batch three parts after a header of their lengths (three 4-byte
little-endian numbers): the `marshal` of each frame's `(described, texts)`, the `marshal` of each frame's numbers
(plain types only: nothing is constructed but lists, tuples, dicts, strings and numbers) and the `pickle` of each
frame's extras (what its notes are made of). The parts are written as they are, not joined into one: a batch is
some 5 KB a trace, copied once more for nothing. The pipe is the parent's own (inherited, not a named pipe or a
socket): nothing else can write to it.
"""

from __future__ import annotations

import json
import logging
import marshal
import pickle
import struct
from pathlib import Path
from typing import Any, BinaryIO

from core.trace._spans import HookTable, extra_notes, render_compact
from core.utils.text import valid_text

__all__ = ["FileWriter", "Frame", "HEADER", "pack", "unpack"]

_log = logging.getLogger("hookchat.trace")

#: One trace for the writer: the chains and hooks the event loop's table numbered since the last frame (`(first
#: hook, hooks, first chain, chains)`, or None), the trace's plain data (`Trace.compact`'s texts and numbers, or
#: None for a frame that only describes) and what the notes of its dispatches are made of (see `compact_record`).
Frame = tuple[tuple[int, list[Any], int, list[Any]] | None, tuple[Any, ...] | None, tuple[Any, ...] | None, list[Any]]

#: The lengths of a batch's three parts, before their bytes on the pipe.
HEADER = struct.Struct("<III")


def pack(frames: list[Frame]) -> tuple[bytes, bytes, bytes, bytes]:
    """`frames` as one batch on the pipe (see the module's docstring): the header, then the three parts, to be
    written in this order. The sink's whole work for a batch, in C but for a frame whose data `marshal` cannot take
    (an odd value in a tool call's arguments, say), whose odd values go as JSON gives them, or extras `pickle` cannot
    take, which go as their notes. The texts go as `marshal` version 4 (ASCII strings copied as they are), the
    numbers as version 2 (no table of the objects seen, which the readings, shared with the live records, would all
    enter)."""
    texts = [frame[:2] for frame in frames]
    numbers = [frame[2] for frame in frames]
    try:
        packed = (marshal.dumps(texts, 4), marshal.dumps(numbers, 2))
    except ValueError:
        texts = [_marshallable(part) for part in texts]
        packed = (marshal.dumps(texts, 4), marshal.dumps([_marshallable(part) for part in numbers], 2))
    extras = [frame[3] for frame in frames]
    try:
        blob = pickle.dumps(extras, pickle.HIGHEST_PROTOCOL)
    except Exception:
        blob = pickle.dumps([_as_notes(frame) for frame in frames], pickle.HIGHEST_PROTOCOL)
    texts_part, numbers_part = packed
    return HEADER.pack(len(texts_part), len(numbers_part), len(blob)), texts_part, numbers_part, blob


def unpack(texts: bytes, numbers: bytes, blob: bytes) -> list[Frame]:
    """The frames of one batch, from its three parts (after its header)."""
    extras = pickle.loads(blob)  # from the parent process, over its own pipe
    parts = zip(marshal.loads(texts), marshal.loads(numbers), extras, strict=True)
    return [(described, text, number, extra) for (described, text), number, extra in parts]


def _marshallable(part: Any) -> Any:
    try:
        marshal.dumps(part, 2)
    except ValueError:
        return _plain(part)
    return part


def _plain(value: Any) -> Any:
    """`value` with what `marshal` cannot take as JSON gives it (`str()` of an odd object), its tuples kept: the
    writer tells a model call's sections by their tuple."""
    kind = type(value)
    if kind is tuple:
        return tuple(map(_plain, value))
    if kind is list:
        return list(map(_plain, value))
    if kind is dict and all(type(key) is str for key in value):
        return {key: _plain(item) for key, item in value.items()}
    if kind in (str, int, float, bool, bytes) or value is None:
        return value
    return json.loads(json.dumps(value, ensure_ascii=False, default=str))


def _as_notes(frame: Frame) -> list[Any]:
    """A frame's extras as their notes, which pickle whatever the probes' snapshots hold."""
    extras = list(frame[3])
    if frame[2] is not None:
        _notes_of(frame[2], extras)
    return extras


def _notes_of(numbers: tuple[Any, ...] | list[Any], extras: list[Any]) -> None:
    for entry in numbers[2]:
        if type(entry) is not dict and len(entry) == 3:
            extras[entry[2]] = extra_notes(extras[entry[2]], len(entry[1]))
    for message in numbers[3]:
        _notes_of(message, extras)


class FileWriter:
    """Renders frames as lines and appends them to `path`, with the file kept open; at `max_bytes` the file moves to
    `<path>.1`. Each file describes the hooks, chains and prompt sections its lines use, before the first line that
    uses them, so either file can be read alone."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self._table = HookTable()
        self._described = (0, 0, 0)  # the hooks, chains and sections of `_table` the current file has described
        self._file: BinaryIO | None = None

    def write(self, frames: list[Frame]) -> None:
        """Render `frames` and append their lines (a trace that cannot be rendered is logged and left out; a
        failed write is logged, and the file opened again for the next batch)."""
        lines: list[str] = []
        for described, texts, numbers, extras in frames:
            if described is not None:
                self._table.learn(*described)
            if texts is not None and numbers is not None:
                lines.append(self._line(texts, numbers, extras))
        try:
            self._append([line for line in lines if line])
        except Exception:
            _log.exception("could not write %d trace(s) to %s", len(lines), self.path)
            self.close()

    def close(self) -> None:
        """Close the file (the next write opens it again)."""
        file, self._file = self._file, None
        if file is not None:
            file.close()

    def _line(self, texts: tuple[Any, ...], numbers: tuple[Any, ...], extras: list[Any]) -> str:
        try:
            return valid_text(render_compact(texts, numbers, extras, self._table)) + "\n"
        except Exception:
            _log.exception("could not serialise trace %s", texts[0] if texts else "?")
            return ""

    def _hooks_line(self) -> bytes:
        """The table line describing the hooks, chains and prompt sections the current file has not described yet
        (b"" if none)."""
        table = self._table
        hooks_done, chains_done, sections_done = self._described
        described = (len(table.hooks), len(table.chains), len(table.sections))
        if described == self._described:
            return b""
        data = {
            "hooks": {str(n): table.hooks[n - 1] for n in range(hooks_done + 1, len(table.hooks) + 1)},
            "chains": {str(n): table.chains[n - 1] for n in range(chains_done + 1, len(table.chains) + 1)},
            "sections": {str(n): table.sections[n - 1] for n in range(sections_done + 1, len(table.sections) + 1)},
        }
        self._described = described
        line = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
        return (valid_text(line) + "\n").encode("utf-8", errors="replace")

    def _append(self, lines: list[str]) -> None:
        """Write `lines`, moving the file to `<path>.1` before a line that would take it past `max_bytes` (counted
        in bytes: a line of CJK text is three times its length); a single larger line gets a file of its own."""
        if not lines:
            return
        file = self._file
        if file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self._file = self.path.open("ab")
            # A file opened anew (an earlier run's, or after a failed write) gets the whole table again: a reader
            # takes the newest description of each number.
            self._described = (0, 0, 0)
            if _ends_mid_line(self.path):  # a writer that ended mid-line: that line is lost, not the next one
                file.write(b"\n")
        pending: list[bytes] = []
        size = file.tell()
        for line in lines:
            data = line.encode("utf-8", errors="replace")  # a lone surrogate left in a trace: "?"
            table = self._hooks_line()
            if size + len(table) + len(data) > self.max_bytes and size > 0:
                file.write(b"".join(pending))
                pending.clear()
                file.close()
                self.path.replace(self.path.with_name(self.path.name + ".1"))
                file = self._file = self.path.open("ab")
                size = 0
                self._described = (0, 0, 0)
                table = self._hooks_line()
            pending.append(table + data)
            size += len(table) + len(data)
        file.write(b"".join(pending))
        file.flush()


def _ends_mid_line(path: Path) -> bool:
    """True when the file at `path` ends with part of a line."""
    with path.open("rb") as file:
        if file.seek(0, 2) == 0:
            return False
        file.seek(-1, 2)
        return file.read(1) != b"\n"
