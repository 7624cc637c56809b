"""Model clients in KiraAI's shape: `LLMModelClient` (`await client.chat(LLMRequest(...))`) over a hookchat
`LLMProvider`, the `ModelInfo` it carries, and `desc_img`, which asks a model to describe a picture."""

from __future__ import annotations

import enum
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from core.chat.message_elements import Image, MediaError, Sticker
from core.provider.llm import LLMProvider, LLMRequest, LLMResponse, OpenAIMessage, ProviderError

__all__ = ["ModelType", "ModelInfo", "LLMModelClient", "LLMStreamChunk", "desc_img", "DEFAULT_VLM_PROMPTS"]

logger = logging.getLogger("hookchat.provider")

#: The prompt `desc_img` sends when given none, by language.
DEFAULT_VLM_PROMPTS = {
    "zh": "描述这张图片的内容；如果图片中有文字，请一并输出。",
    "en": "Describe the content of this image. If it contains text, include that text in the description.",
}


class ModelType(enum.Enum):
    """Kinds of models KiraAI knows; hookchat's providers serve `LLM`."""

    LLM = "llm"
    TTS = "tts"
    STT = "stt"
    EMBEDDING = "embedding"
    RERANK = "rerank"
    IMAGE = "image"
    VIDEO = "video"


@dataclass(slots=True)
class ModelInfo:
    """Which model a client talks to: `provider_id:model_id`, with the provider's name and settings."""

    model_type: ModelType
    model_id: str
    provider_id: str
    provider_name: str
    provider_config: dict[str, Any] = field(default_factory=dict)
    model_config: dict[str, Any] = field(default_factory=dict)

    @property
    def uuid(self) -> str:
        """`provider_id:model_id`, the form `ctx.get_llm_client(model_uuid=...)` takes."""
        return f"{self.provider_id}:{self.model_id}"


@dataclass(slots=True)
class LLMStreamChunk:
    """One piece of a streamed answer (KiraAI's shape); the last has `is_final` and the finish reason."""

    delta_text: str = ""
    delta_reasoning: str = ""
    tool_calls_delta: list[dict[str, Any]] = field(default_factory=list)
    is_final: bool = False
    finish_reason: str = ""
    usage: dict[str, Any] | None = None


class LLMModelClient:
    """A chat model a plugin calls itself: `resp = await client.chat(req)`; `resp.text_response` is the answer.

    It talks to the application's provider with `req.model` set to this client's model (tried first, then the
    provider's failover list). A model failure raises `ProviderError` (KiraAI raises its `ProviderAPIError`).
    The request is the plugin's own: no hooks run for it and nothing of it enters any session's history.
    """

    type = ModelType.LLM

    def __init__(self, provider: LLMProvider, model: ModelInfo) -> None:
        self.provider = provider
        self.model = model

    async def chat(self, request: LLMRequest, **kwargs: Any) -> LLMResponse:
        """Send `request` and return the whole answer."""
        if request.model is None:
            request.model = self.model.model_id
        return await self.provider.complete(request)

    async def chat_stream(self, request: LLMRequest, **kwargs: Any) -> AsyncIterator[LLMStreamChunk]:
        """Send `request` and yield the answer as it arrives; the last chunk has `is_final=True`."""
        if request.model is None:
            request.model = self.model.model_id
        final: LLMResponse | None = None
        stream = self.provider.stream(request)
        try:
            async for item in stream:
                if item.response is not None:
                    final = item.response
                if item.text or item.reasoning:
                    yield LLMStreamChunk(delta_text=item.text, delta_reasoning=item.reasoning)
        finally:
            await stream.aclose()
        if final is None:
            raise ProviderError("the model's stream ended without a final response")
        yield LLMStreamChunk(
            tool_calls_delta=[c.to_openai() for c in final.tool_calls],
            is_final=True,
            finish_reason=final.finish_reason or ("tool_calls" if final.tool_calls else "stop"),
            usage={"input_tokens": final.usage.prompt_tokens, "output_tokens": final.usage.completion_tokens},
        )

    def __repr__(self) -> str:
        return f"LLMModelClient({self.model.uuid!r})"


async def desc_img(
    client: LLMModelClient, image: Image | Sticker, prompt: str | None = None, lang: str | None = None
) -> str:
    """Ask `client` to describe `image` (sent inline as a data URL, with `prompt`, by default one in `lang`).

    Returns the description, or "" when the picture cannot be read or the model fails (logged), as KiraAI does.
    """
    if prompt is None:
        code = str(lang or "en").lower().replace("_", "-").split("-", 1)[0]
        prompt = DEFAULT_VLM_PROMPTS.get(code, DEFAULT_VLM_PROMPTS["en"])
    try:
        url = image.url if image.source == "url" else await image.get_data_url()  # the model fetches a URL itself
        request = LLMRequest(
            messages=[
                OpenAIMessage(
                    role="user",
                    content=[
                        {"type": "image_url", "image_url": {"url": url, "detail": "high"}},
                        {"type": "text", "text": prompt},
                    ],
                )
            ]
        )
        resp = await client.chat(request)
    except (MediaError, ProviderError) as exc:
        logger.error("describing an image with %s failed: %s", client.model.uuid, exc)
        return ""
    return resp.text_response
