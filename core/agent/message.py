"""KiraAI's import path for `OpenAIMessage` (defined with the request types, in `core.provider.llm`)."""

from core.provider.llm import OpenAIMessage

__all__ = ["OpenAIMessage"]
