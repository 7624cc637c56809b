"""The JSON-lines trace file's writer process: `python -m core.trace._child PATH MAX_BYTES` reads batches of
frames from its stdin (see `core.trace._writer`) and writes them to PATH, rotated at MAX_BYTES, until stdin ends."""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path
from typing import BinaryIO

from core.trace._writer import HEADER, FileWriter, unpack

__all__ = ["main"]


def _read(stream: BinaryIO, size: int) -> bytes:
    """`size` bytes of `stream`, or fewer at its end."""
    chunks: list[bytes] = []
    while size:
        chunk = stream.read(size)
        if not chunk:
            break
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def main(argv: list[str]) -> int:
    """The writer process: frames from stdin to the file at `argv[0]` (rotated at `argv[1]` bytes) until stdin
    ends, which it does when the parent closes it or ends in any way (even killed)."""
    # Ctrl-C in a terminal reaches the whole process group: the parent drains this process as it stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(format="hookchat trace writer: %(levelname)s %(message)s")
    writer = FileWriter(Path(argv[0]), int(argv[1]))
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    stdout.write(b"r")  # ready: the parent writes in its thread if this never comes
    stdout.flush()
    try:
        while True:
            header = _read(stdin, HEADER.size)
            if len(header) < HEADER.size:
                return 0
            sizes = HEADER.unpack(header)
            parts = [_read(stdin, size) for size in sizes]
            if any(len(part) < size for part, size in zip(parts, sizes, strict=True)):
                return 0
            writer.write(unpack(*parts))
    finally:
        writer.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
