"""The plugin author's guide (docs/plugins.md) runs as written: its plugin files are written, its programs run in
order in an empty directory, and each prints exactly the output the guide shows.

Conventions in the guide: `<!-- file: PATH -->` before a code block writes the block to PATH; every other
`python` block is a program; `<!-- output -->` before a block gives the previous program's expected output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "plugins.md"
BLOCK = re.compile(r"^(?:<!-- (?:file: (?P<path>\S+)|(?P<output>output)) -->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```$",
                   re.MULTILINE | re.DOTALL)


def test_every_example_of_the_guide_runs_and_prints_what_the_guide_shows(tmp_path: Path) -> None:
    text = GUIDE.read_text(encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    programs = 0
    last: tuple[int, str] | None = None  # (line, stdout) of the last program
    for block in BLOCK.finditer(text):
        line = text.count("\n", 0, block.start()) + 1
        body = block["body"]
        if block["path"]:
            target = tmp_path / block["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
        elif block["output"]:
            assert last is not None, f"docs/plugins.md:{line}: output block with no program before it"
            assert last[1] == body, f"docs/plugins.md:{line}: the program at line {last[0]} printed\n{last[1]}"
            last = None
        elif block["lang"] == "python":
            run = subprocess.run([sys.executable, "-c", body], cwd=tmp_path, env=env, capture_output=True,
                                 text=True, timeout=60, check=False)
            assert run.returncode == 0, f"docs/plugins.md:{line}: the program failed:\n{run.stderr}"
            last = (line, run.stdout)
            programs += 1
    assert programs >= 5
