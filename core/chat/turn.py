"""What became of messages: `Received` (one incoming message, its strategy and the turn it caused) and `TurnResult`
(what one turn sent, whether a hook stopped it, the error shown)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from core.chat.message_utils import (
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    MessageStrategy,
)

__all__ = ["TurnResult", "Received"]


@dataclass
class TurnResult:
    """What one turn did: the messages it sent, whether a hook stopped it, and the error shown, if any.

    `error` is what a chat user may see (`ProviderError.public` for a model failure: never the provider's URL,
    error body or key); the detail is in the log and the turn's trace."""

    batch: KiraMessageBatchEvent
    sent: list[KiraIMSentResult] = field(default_factory=list)
    stopped: bool = False
    error: str | None = None
    trace_id: str = ""  # the turn's trace (see core.trace), when tracing is on
    #: The turn reached a per-turn cap (messages or characters sent): the rest was not sent, and a notice said so.
    capped: bool = False
    #: Characters sent so far (the messages' text), counted against the per-turn cap.
    chars_sent: int = 0
    #: A send was under way when the turn stopped: the platform may have shown it (a turn cancelled then counts as
    #: having answered, so a restart does not answer its messages a second time).
    sending: bool = False

    @property
    def chains(self) -> list[MessageChain]:
        """The message chains the turn sent, in order."""
        return [r.chain for r in self.sent]


@dataclass
class Received:
    """What happened to one incoming message: its event, the strategy applied, and the turn it caused (if any)."""

    event: KiraMessageEvent
    strategy: MessageStrategy | None  # None when a hook stopped the message
    turn: asyncio.Future[TurnResult] | None = None
