"""Fixtures of the tag tests: the anyio backend, and a small tag set whose handlers make results easy to read."""

from __future__ import annotations

import pytest
from sample_tags import make_tag_set

from core.tag import TagSet


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def tag_set() -> TagSet:
    """text, at, act (root), echo and boom (raises): see sample_tags.py."""
    return make_tag_set()
