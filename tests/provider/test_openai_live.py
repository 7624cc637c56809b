"""`OpenAIProvider` against a real OpenAI-compatible server: llama-cpp-python's server running the embedded model on
loopback (the `llama_server` fixture). Slow-marked, but part of the normal test run."""

from __future__ import annotations

import pytest

from core.provider import LLMRequest, ProviderError
from core.provider.openai_provider import OpenAIProvider

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def request(text: str) -> LLMRequest:
    req = LLMRequest(user_prompt=text, max_tokens=12, temperature=0.0)
    req.get_prompt("role").content = "You are a helpful assistant. Answer briefly."
    return req


async def test_complete_and_stream_against_llama_cpp_server(llama_server, monkeypatch):
    monkeypatch.setenv("HOOKCHAT_TEST_LLAMA_KEY", llama_server.api_key)
    provider = OpenAIProvider(llama_server.base_url, [llama_server.model], api_key_env="HOOKCHAT_TEST_LLAMA_KEY",
                              timeout=60)
    try:
        resp = await provider.complete(request("Name a colour."))
        assert resp.text_response.strip()
        assert resp.usage.completion_tokens > 0 and resp.finish_reason in ("stop", "length")

        deltas, final = [], None
        async for event in provider.stream(request("Name an animal.")):
            if event.response is not None:
                final = event.response
            elif event.text:
                deltas.append(event.text)
        assert deltas and final is not None
        assert final.text_response == "".join(deltas) and final.text_response.strip()
    finally:
        await provider.aclose()


async def test_wrong_api_key_is_reported_without_the_key(llama_server):
    provider = OpenAIProvider(llama_server.base_url, [llama_server.model], api_key="sk-wrong-4242", max_retries=0)
    try:
        with pytest.raises(ProviderError, match="HTTP 401") as caught:
            await provider.complete(request("Hello"))
        assert "sk-wrong-4242" not in str(caught.value)
    finally:
        await provider.aclose()
