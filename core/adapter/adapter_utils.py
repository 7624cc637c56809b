"""KiraAI's adapter interface, `IMAdapter` (its `core.adapter.adapter_utils` path).

hookchat's own adapter contract is `core.adapter.Adapter`. `IMAdapter` is how KiraAI plugins see an adapter:
`ctx.adapter_mgr.get_adapter(name)` returns one, built over the hookchat adapter of that name, so a plugin can type
or test against it (`isinstance(adapter, IMAdapter)`) and send with `send_group_message` / `send_direct_message`.
"""

from __future__ import annotations

import abc
from typing import Any

from core.chat.message_utils import KiraIMSentResult, MessageChain
from core.chat.session import AdapterInfo

__all__ = ["IMAdapter"]


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
