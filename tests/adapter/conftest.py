"""Fixtures of the adapter tests: a running NapCat mock, a bot (a real `HookChat`) around an adapter, a model that
waits at a gate, and a plugin that records every incoming message event."""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from typing import Any

import pytest

from core.adapter import Adapter
from core.app import HookChat
from core.chat import KiraMessageEvent
from core.config import HookchatConfig
from core.plugin import BasePlugin, Priority, on
from core.provider import LLMRequest, LLMResponse
from core.testing import BUILTIN_PLUGINS_DIR, ScriptedProvider
from tests.adapter.napcat import MockPeer
from tests.adapter.nonebot_models import assert_delivered_agrees


@pytest.fixture
async def mock_peer() -> AsyncIterator[MockPeer]:
    peer = MockPeer()
    await peer.start()
    try:
        yield peer
    finally:
        await peer.stop()


class GatedProvider(ScriptedProvider):
    """A `ScriptedProvider` that holds each request until `gate` is set; `called` is set when one arrives."""

    def __init__(self, responses: Iterable[Any] = ()) -> None:
        super().__init__(responses)
        self.gate = asyncio.Event()
        self.called = asyncio.Event()

    async def complete(self, req: LLMRequest) -> LLMResponse:
        self.called.set()
        await self.gate.wait()
        return await super().complete(req)


class Inbox:
    """The `im_message` events a `recorder()` plugin saw, in order."""

    def __init__(self) -> None:
        self._events: asyncio.Queue[KiraMessageEvent] = asyncio.Queue()

    def put_nowait(self, event: KiraMessageEvent) -> None:
        """Record one event (the plugin calls this)."""
        self._events.put_nowait(event)

    async def get(self) -> KiraMessageEvent:
        """The next event (waits for it); its raw OneBot event is checked against nonebot's models first."""
        event = await self._events.get()
        assert_delivered_agrees(event.message)
        return event


def recorder() -> tuple[type[BasePlugin], Inbox]:
    """A plugin class that records every `im_message` event in the returned inbox (before the chat plugin)."""
    inbox = Inbox()

    class Recorder(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 1)
        async def record(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            inbox.put_nowait(event)

    return Recorder, inbox


@asynccontextmanager
async def running_bot(
    adapter: Adapter, provider: ScriptedProvider, plugins: Iterable[type] = (), **sections: Any
) -> AsyncIterator[HookChat]:
    """A real bot with the chat and tag plugins (the chat plugin flushing every message at once) and `adapter`;
    `sections` are more config sections (`deadlines={...}`)."""
    with tempfile.TemporaryDirectory(prefix="hookchat-onebot-") as data_dir:
        config = HookchatConfig.model_validate(
            {
                "data": {"dir": data_dir},
                "plugins": {"dirs": [], "config": {"chat": {"flush_messages": 1}}},
                "adapters": {"console": False},
                **sections,
            }
        )
        app = HookChat(
            config,
            provider=provider,
            adapters=[adapter],
            entry_points=False,
            plugins=[BUILTIN_PLUGINS_DIR / "chat", BUILTIN_PLUGINS_DIR / "builtin_tags", *plugins],
        )
        async with app:
            yield app
