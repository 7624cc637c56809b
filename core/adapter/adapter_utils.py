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
    """What an adapter's `typing()` returns: held around a model call, it starts `keep()` (the platform's typing
    indicator, renewed until it is cancelled; it must not raise) as a task named `name` once `after` seconds have
    passed, and cancels it when the call ends. A quicker answer costs one timer, not a task started and cancelled
    (most answers are quicker: no indicator is needed then)."""

    __slots__ = ("_after", "_keep", "_name", "_timer", "_task")

    def __init__(self, after: float, keep: Callable[[], Coroutine[Any, Any, None]], name: str) -> None:
        self._after, self._keep, self._name = after, keep, name
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None

    def _begin(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._keep(), name=self._name)

    async def __aenter__(self) -> None:
        self._timer = asyncio.get_running_loop().call_later(self._after, self._begin)

    async def __aexit__(self, *exc_info: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
