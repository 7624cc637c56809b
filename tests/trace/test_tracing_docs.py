"""The Python blocks of docs/tracing.md run as written, each on its own."""

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "tracing.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("number", range(1, len(BLOCKS) + 1))
def test_the_block_runs(number):
    exec(compile(BLOCKS[number - 1], f"tracing.md block {number}", "exec"), {"__name__": "docs_tracing"})
