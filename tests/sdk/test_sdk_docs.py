"""The Python blocks of docs/sdk.md and docs/tool-registry.md run as written and print what the pages say."""

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def run_blocks(page: str, capsys: pytest.CaptureFixture[str]) -> list[str]:
    printed = []
    for number, block in enumerate(BLOCK.findall((DOCS / page).read_text(encoding="utf-8")), 1):
        exec(compile(block, f"{page} block {number}", "exec"), {"__name__": f"docs_block_{number}"})
        printed.append(capsys.readouterr().out)
    return printed


def test_the_sdk_page_runs(capsys):
    personas, notes = run_blocks("sdk.md", capsys)
    assert personas == "[[], ['diary']]\n"
    first, second = notes.splitlines()
    assert first == "Ok(value={'count': 1})"
    assert second.startswith("Err(") and "invalid arguments for notes:add: title: 42 is not of type 'string'" in second


def test_the_tool_registry_page_runs(capsys):
    [printed] = run_blocks("tool-registry.md", capsys)
    assert printed == """['{"shouted": "HELLO"}']\n"""
