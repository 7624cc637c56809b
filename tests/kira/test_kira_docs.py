"""docs/kira-compat.md stays true: its Python blocks run on their own, and its example plugins behave as it says."""

import re
from pathlib import Path

import pytest

from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

PAGE = Path(__file__).resolve().parents[2] / "docs" / "kira-compat.md"
BLOCKS = re.findall(r"```python\n(.*?)```", PAGE.read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("number", range(len(BLOCKS)))
def test_every_python_block_runs_on_its_own(number):
    exec(compile(BLOCKS[number], f"kira-compat.md block {number + 1}", "exec"), {"__name__": "kira_compat_doc"})


async def test_the_two_after_xml_parse_forms_of_the_page_work_together():
    namespace = {"__name__": "kira_compat_doc"}
    exec(compile(BLOCKS[0], "kira-compat.md block 1", "exec"), namespace)
    provider = ScriptedProvider(["<msg>hello</msg><msg>  </msg><msg>bye</msg>"])

    async with ChatHarness([namespace["KiraStyle"], namespace["SeedStyle"]], provider) as bot:
        chains = await bot.send("hi")

    assert [c.plain_text for c in chains] == ["HELLO", "BYE"]
