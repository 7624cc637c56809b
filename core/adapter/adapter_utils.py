"""KiraAI's adapter interface, `IMAdapter` (its `core.adapter.adapter_utils` path), and `DelayedTyping`, the typing
indicator the platform adapters share.

hookchat's own adapter contract is `core.adapter.Adapter`. `IMAdapter` is how KiraAI plugins see an adapter:
`ctx.adapter_mgr.get_adapter(name)` returns one, built over the hookchat adapter of that name, so a plugin can type
or test against it (`isinstance(adapter, IMAdapter)`) and send with `send_group_message` / `send_direct_message`.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Coroutine
from contextlib import AbstractAsyncContextManager
from typing import Any

from core.chat.message_utils import KiraIMSentResult, MessageChain
from core.chat.session import AdapterInfo
from core.utils.tasks import cancel_and_wait

__all__ = ["IMAdapter", "DelayedTyping"]


class IMAdapter(abc.ABC):
    """An instant-messaging platform connection as KiraAI plugins use it.

    `info` describes it (`name` is the first part of session ids, `platform` its type), `config` holds its options,
    `message_types` names the element types it can send, `emoji_dict` maps emoji ids to descriptions (None when the
    platform has none).
    """

    def __init__(self, info: AdapterInfo, message_types: list[str] | None = None) -> None:
        self.info = info
        self.config: dict[str, Any] = info.config
        self.message_types: list[str] = list(message_types or [])
        self.emoji_dict: dict[str, Any] | None = None

    @abc.abstractmethod
    async def send_group_message(self, group_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send `send_message_obj` to the group `group_id`."""

    @abc.abstractmethod
    async def send_direct_message(self, user_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send `send_message_obj` to the user `user_id` in a direct chat."""

    @abc.abstractmethod
    def get_client(self) -> Any:
        """The platform client behind the adapter."""


class DelayedTyping:
    """An adapter's typing indicators, each shown once the model has written for `after` seconds: `held(keep)` is
    what the adapter's `typing()` returns, held around a model call; `after` seconds into it, `keep()` (the
    platform's indicator, renewed until it is cancelled; it must not raise) starts as a task named `name`, and is
    cancelled when the call ends. Most answers are quicker and need no indicator: one timer of the adapter's own
    looks at the calls under way (the oldest first) when the first of them is due, so a quick answer costs no
    timer, task or cancellation of its own."""

    __slots__ = ("_after", "_name", "_waiting", "_timer")

    def __init__(self, after: float, name: str) -> None:
        self._after, self._name = after, name
        self._waiting: dict[_Held, float] = {}  # the calls without an indicator yet -> when each began, oldest first
        self._timer: asyncio.TimerHandle | None = None

    def held(self, keep: Callable[[], Coroutine[Any, Any, None]]) -> AbstractAsyncContextManager[None]:
        """The context manager of one model call, whose indicator `keep()` shows."""
        return _Held(self, keep)

    def _begin(self, held: _Held) -> None:
        loop = asyncio.get_running_loop()
        self._waiting[held] = loop.time()
        if self._timer is None:
            self._timer = loop.call_later(self._after, self._due)

    def _due(self) -> None:
        loop = asyncio.get_running_loop()
        self._timer = None
        now = loop.time()
        while self._waiting:
            held, began = next(iter(self._waiting.items()))
            if began + self._after > now:  # the rest began later still
                self._timer = loop.call_at(began + self._after, self._due)
                return
            del self._waiting[held]
            held.task = loop.create_task(held.keep(), name=self._name)

    async def _end(self, held: _Held) -> None:
        self._waiting.pop(held, None)
        task, held.task = held.task, None
        if task is not None:
            await cancel_and_wait(task)


class _Held:
    """One model call's hold on its adapter's `DelayedTyping`."""

    __slots__ = ("_owner", "keep", "task")

    def __init__(self, owner: DelayedTyping, keep: Callable[[], Coroutine[Any, Any, None]]) -> None:
        self._owner, self.keep = owner, keep
        self.task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> None:
        self._owner._begin(self)

    async def __aexit__(self, *exc_info: object) -> None:
        await self._owner._end(self)
