"""Pull the code examples out of a seed document, verbatim, so tests run exactly the seed's text."""

from __future__ import annotations

from pathlib import Path

CODE_START = ("from ", "import ", "class ", "@")


def code_blocks(path: Path) -> list[str]:
    """Each maximal run of code lines: starts at an import/class line, continues over indented or blank lines and
    further top-level code lines, ends at the first line of prose."""
    blocks: list[list[str]] = []
    current: list[str] | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        is_code = line.startswith(CODE_START) or (current is not None and (not line.strip() or line[0] in " \t"))
        if is_code:
            if current is None:
                current = []
                blocks.append(current)
            current.append(line)
        else:
            current = None
    return ["\n".join(b).strip() + "\n" for b in blocks]
