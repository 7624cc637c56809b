"""Talking to the model: `LLMRequest`, `LLMResponse`, `ToolResult`, the provider interface and the agent loop."""

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
from core.provider.model_client import LLMModelClient, ModelInfo, ModelType

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
