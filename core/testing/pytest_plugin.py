"""pytest fixtures of the testing kit (registered through the `pytest11` entry point of hookchat).

`scripted_provider` is a fresh `ScriptedProvider`; `chat_harness` is a factory: `async with chat_harness(plugins=[P])
as bot: ...` with the fixture's provider as default.
"""

from __future__ import annotations

from typing import Any

import pytest

from core.testing import ChatHarness, ScriptedProvider


@pytest.fixture
def scripted_provider() -> ScriptedProvider:
    """A `ScriptedProvider` with no responses queued; add them with `.add(...)`."""
    return ScriptedProvider()


@pytest.fixture
def chat_harness(scripted_provider: ScriptedProvider):
    """A factory of `ChatHarness`es that use the `scripted_provider` fixture unless given another provider."""

    def make(*args: Any, **kwargs: Any) -> ChatHarness:
        kwargs.setdefault("provider", scripted_provider)
        return ChatHarness(*args, **kwargs)

    return make
