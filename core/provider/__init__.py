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

__all__ = [
    "ChatMessage",
    "LLMProvider",
    "LLMRequest",
    "LLMResponse",
    "ProviderError",
    "StreamEvent",
    "TokenUsage",
    "ToolCall",
    "ToolResult",
]
