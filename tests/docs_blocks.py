"""Running the code blocks of a documentation page the way a reader would, with the conventions of docs/plugins.md:

- `<!-- file: PATH -->` before a code block: the reader saves the block as PATH (in a fresh folder);
- every other `python` block is a program: it runs on its own, in a fresh interpreter started in that folder
  (as `python` started there), so it may import the files saved before it but nothing else of the page;
- `<!-- output -->` before a block: what the program before it prints, exactly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
BLOCK = re.compile(
    r"^(?:<!-- (?:file: (?P<path>\S+)|(?P<output>output)) -->\n+)?```(?P<lang>\w*)\n(?P<body>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


def programs(page: Path) -> int:
    """How many runnable Python blocks `page` has."""
    return sum(1 for b in BLOCK.finditer(page.read_text(encoding="utf-8")) if b["lang"] == "python" and not b["path"])


def run_page(page: Path, folder: Path) -> list[str]:
    """Save the page's files and run its programs, each on its own, checking each `<!-- output -->` block;
    returns what each program printed."""
    text = page.read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(folder)])}
    printed: list[str] = []
    last: tuple[int, str] | None = None
    for block in BLOCK.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        where = f"{page.name}:{line}"
        if block["path"]:
            target = folder / block["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(block["body"], encoding="utf-8")
        elif block["output"]:
            assert last is not None, f"{where}: an output block with no program before it"
            assert last[1] == block["body"], f"{where}: the program at line {last[0]} printed\n{last[1]}"
            last = None
        elif block["lang"] == "python":
            run = subprocess.run(
                [sys.executable, "-c", block["body"]],
                cwd=folder,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
            assert run.returncode == 0, f"{where}: the program failed:\n{run.stderr}"
            last = (line, run.stdout)
            printed.append(run.stdout)
    return printed
