"""The example plugin of the guide, `plugins/shop/`, is the one the docs show: every `<!-- file: plugins/shop/... -->`
block of docs/guide.md and docs/testing.md is the repository's file, byte for byte (test_documentation runs the
blocks, so this keeps the folder in the repository tested too), and its own test passes."""

from __future__ import annotations

import pytest

from tests.docs_blocks import BLOCK, DOCS, ROOT

SHOP = ROOT / "plugins" / "shop"


@pytest.mark.parametrize("page", ["guide.md", "testing.md"])
def test_the_pages_show_the_example_plugin_as_it_is_in_plugins(page):
    shown = {
        b["path"]: b["body"]
        for b in BLOCK.finditer((DOCS / page).read_text(encoding="utf-8"))
        if b["path"] and b["path"].startswith("plugins/shop/")
    }
    assert set(shown) == {"plugins/shop/manifest.json", "plugins/shop/main.py", "plugins/shop/test_shop.py"}
    for path, body in shown.items():
        assert (ROOT / path).read_text(encoding="utf-8") == body, f"{page} shows another {path}: update one of them"


def test_the_example_plugins_test_is_at_most_ten_lines():
    lines = [line for line in (SHOP / "test_shop.py").read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(lines) <= 10
