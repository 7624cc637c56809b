"""Chat data model: message elements, `MessageChain`, the message events, sessions and strategies."""

from core.chat.buffers import SessionBuffers
from core.chat.message_elements import BaseMessageElement
from core.chat.message_utils import (
    KiraCustomEvent,
    KiraEvent,
    KiraExceptionEvent,
    KiraIMMessage,
    KiraIMSentResult,
    KiraLifecycleEvent,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    KiraStepResult,
    MessageChain,
    MessageChains,
    MessageStrategy,
)
from core.chat.session import AdapterInfo, Group, Session, User
from core.chat.turn import Received, TurnResult

__all__ = [
    "BaseMessageElement",
    "MessageChain",
    "MessageChains",
    "MessageStrategy",
    "KiraEvent",
    "KiraIMMessage",
    "KiraMessageEvent",
    "KiraMessageBatchEvent",
    "KiraIMSentResult",
    "KiraStepResult",
    "KiraExceptionEvent",
    "KiraCustomEvent",
    "KiraLifecycleEvent",
    "Session",
    "Group",
    "User",
    "Received",
    "TurnResult",
    "SessionBuffers",
    "AdapterInfo",
]
