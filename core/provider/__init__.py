"""Talking to the model: `LLMRequest`, `LLMResponse`, `ToolResult`, the provider interface and the agent loop."""

from typing import TYPE_CHECKING

from core.provider.llm import (
    ChatMessage,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    ProviderError,
    StreamEvent,
    TokenUsage,
    ToolCall,
    ToolResult,
)
from core.utils.lazy import lazy_names

# KiraAI's model clients are imported on first use (PEP 562): only KiraAI plugins that ask the provider manager for
# one use them, and their dataclasses are 0.6% of a `hookchat plugins` (docs/performance.md).
_LAZY: dict[str, str] = dict.fromkeys(("LLMModelClient", "ModelInfo", "ModelType"), "core.provider.model_client")

if TYPE_CHECKING:  # what the checker sees of the lazy names
    from core.provider.model_client import LLMModelClient, ModelInfo, ModelType


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "ChatMessage",
    "LLMProvider",
    "LLMRequest",
    "LLMModelClient",
    "LLMResponse",
    "ModelInfo",
    "ModelType",
    "ProviderError",
    "StreamEvent",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
]
