"""docs/adapters.md stays true to the code: each Python block runs on its own, as written; and the OneBot section of
docs/configuration.md is a config that builds its adapters."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from core.adapter import build_adapters
from core.adapter.onebot import OneBotAdapter
from core.config import load_config

DOCS = Path(__file__).resolve().parents[2] / "docs"
BLOCKS = re.findall(r"```python\n(.*?)```", (DOCS / "adapters.md").read_text(encoding="utf-8"), re.S)


@pytest.mark.parametrize("number", range(1, len(BLOCKS) + 1))
def test_each_python_block_of_the_adapters_page_runs_on_its_own(number):
    exec(compile(BLOCKS[number - 1], f"adapters.md block {number}", "exec"), {"__name__": f"adapters_{number}"})


def test_the_onebot_configuration_examples_build_their_adapters(tmp_path, monkeypatch):
    section = (DOCS / "configuration.md").read_text(encoding="utf-8").split("## OneBot v11 (QQ)", 1)[1]
    section = section.split("\n## ", 1)[0]
    examples = re.findall(r"```toml\n(.*?)```", section, re.S)
    assert examples
    monkeypatch.setenv("ONEBOT_TOKEN", "t")
    for number, example in enumerate(examples, 1):
        path = tmp_path / f"example{number}.toml"
        path.write_text(example, encoding="utf-8")
        adapters = build_adapters(load_config(path, env={}))
        assert adapters and all(isinstance(a, OneBotAdapter) for a in adapters if a.name != "console"), number


@pytest.mark.parametrize(
    ("section", "variables"),
    [
        ("Telegram", {"TELEGRAM_BOT_TOKEN": "123456:doc-token", "TELEGRAM_WEBHOOK_SECRET": "doc-secret"}),
        ("Discord", {"DISCORD_BOT_TOKEN": "doc.token"}),
    ],
)
def test_the_telegram_and_discord_examples_build_their_adapters(section, variables, tmp_path, monkeypatch):
    # what an operator copies from the page, with the variables the page tells them to export
    text = (DOCS / "adapters.md").read_text(encoding="utf-8").split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    examples = re.findall(r"```toml\n(.*?)```", text, re.S)
    assert examples
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    for number, example in enumerate(examples, 1):
        path = tmp_path / f"example{number}.toml"
        path.write_text(example, encoding="utf-8")
        (adapter,) = [a for a in build_adapters(load_config(path, env={})) if a.name != "console"]
        assert type(adapter).__name__ == f"{section}Adapter", number
