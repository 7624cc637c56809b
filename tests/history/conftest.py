"""Fixtures for the history store tests: the anyio backend and an open store in a temporary directory."""

import pytest

from core.history import HistoryStore


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def store(tmp_path):
    async with HistoryStore(tmp_path / "history.sqlite3") as s:
        yield s
