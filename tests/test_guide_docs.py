"""The Python blocks of the guide pages run as written, so the docs stay true to the code."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


@pytest.mark.parametrize("page", ["guide.md", "pipeline.md"])
def test_every_python_block_of_the_page_runs(page):
    namespace = {"__name__": f"docs_{page[:-3]}"}
    for number, block in enumerate(BLOCK.findall((DOCS / page).read_text(encoding="utf-8")), 1):
        exec(compile(block, f"{page} block {number}", "exec"), namespace)


def test_the_testing_page_is_a_working_test_module(tmp_path):
    blocks = BLOCK.findall((DOCS / "testing.md").read_text(encoding="utf-8"))
    (tmp_path / "test_from_docs.py").write_text("\n\n".join(blocks), encoding="utf-8")
    result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
                            cwd=DOCS.parent, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "2 passed" in result.stdout
