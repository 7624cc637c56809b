"""KiraAI's import path for the request and response types (`core.provider.llm_model`).

`DYNAMIC_PROMPT_NAMES` are the system prompt sections whose content changes on nearly every request; KiraAI can
move them to the user message to keep the system prompt cacheable. hookchat keeps every section in the system
prompt, in order; the names are here for plugins that look sections up by them.
"""

from core.provider.llm import LLMRequest, LLMResponse
from core.provider.model_client import LLMStreamChunk

__all__ = ["LLMRequest", "LLMResponse", "LLMStreamChunk", "DYNAMIC_PROMPT_NAMES", "MEMORY_PROMPT_NAME"]

#: Sections whose content changes on nearly every request (KiraAI's tuple; hookchat's requests have "time").
DYNAMIC_PROMPT_NAMES = ("sessions", "chat_env", "time")
#: The section holding long-term memory.
MEMORY_PROMPT_NAME = "memory"
