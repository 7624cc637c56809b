"""Talking to the model: `LLMRequest`, `LLMResponse`, `ToolResult`, the provider interface and the agent loop."""

from typing import TYPE_CHECKING, Any

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

# KiraAI's model clients are imported on first use (PEP 562): only KiraAI plugins that ask the provider manager for
# one use them, and their dataclasses are 0.6% of a `hookchat plugins` (docs/performance.md).
_LAZY: dict[str, str] = dict.fromkeys(("LLMModelClient", "ModelInfo", "ModelType"), "core.provider.model_client")

if TYPE_CHECKING:  # what the checker sees of the lazy names
    from core.provider.model_client import LLMModelClient, ModelInfo, ModelType


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'core.provider' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


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
