"""The documentation stays true to the code: every Python block of every page (and of the README) runs on its own
as written and prints what the page shows (conventions in `tests/docs_blocks.py`), and every file of the project a
page names exists."""

from __future__ import annotations

import re

import pytest

from tests.docs_blocks import DOCS, ROOT, programs, run_page

PAGES = sorted(DOCS.glob("*.md")) + [ROOT / "README.md"]
RUNNABLE = [p for p in PAGES if programs(p)]
# A path of this repository in backticks: `core/app.py`, `tests/plugin/`, `bench/model.py`, `docs/tags.md`, ...
NAMED_FILE = re.compile(r"`((?:core|plugin|tests|bench|docs|\.ci)/[\w./-]*)`")


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.name for p in RUNNABLE])
def test_every_python_block_runs_on_its_own(page, tmp_path):
    run_page(page, tmp_path)


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_every_file_a_page_names_exists(page):
    missing = sorted(
        {
            name
            for name in NAMED_FILE.findall(page.read_text(encoding="utf-8"))
            if "*" not in name and "<" not in name and not (ROOT / name).exists()
        }
    )
    assert missing == [], f"{page.name} names files that do not exist"
