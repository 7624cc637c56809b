"""Platform adapters: what a chat platform implements to deliver messages to the bot and send its answers."""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any

from core.chat.message_utils import KiraIMSentResult, MessageChain
from core.chat.session import Session

if TYPE_CHECKING:
    from core.app import HookChat

__all__ = ["Adapter", "ALL_ELEMENTS", "AdapterError"]

#: Element type names an adapter may support; the built-in tags offered to the model follow this set.
ALL_ELEMENTS = frozenset(
    {"text", "image", "at", "reply", "forward", "emoji", "sticker", "record", "notice", "poke", "json", "file", "video"}
)


class AdapterError(RuntimeError):
    """An adapter could not send a message."""


class Adapter(abc.ABC):
    """A chat platform connection. Incoming messages go to `self.app.receive(KiraIMMessage(...))`; outgoing ones
    come through `send`. `capabilities` names the element types the platform can send."""

    name: str = "adapter"
    capabilities: frozenset[str] = ALL_ELEMENTS

    def __init__(self, name: str | None = None, **options: Any) -> None:
        if name:
            self.name = name
        self.options = options
        self.app: HookChat | None = None

    async def start(self, app: HookChat) -> None:
        """Connect; called by the app with itself once plugins are loaded."""
        self.app = app

    async def stop(self) -> None:
        """Disconnect."""

    @abc.abstractmethod
    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send one message to `session`; return what happened (never raise for a platform refusal)."""
