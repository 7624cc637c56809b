"""`OpenAIProvider` against a real OpenAI-compatible server: xllamacpp's own HTTP server running the embedded model on
loopback (the `model_server` fixture). Slow-marked, but part of the normal test run."""

from __future__ import annotations

import pytest

from core.provider import LLMRequest, ProviderError
from core.provider.openai_provider import OpenAIProvider

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def request(text: str) -> LLMRequest:
    req = LLMRequest(user_prompt=text, max_tokens=12, temperature=0.0)
    req.get_prompt("role").content = "You are a helpful assistant. Answer briefly."
    return req


async def test_complete_and_stream_against_the_xllamacpp_server(model_server, monkeypatch):
    monkeypatch.setenv("HOOKCHAT_TEST_MODEL_KEY", model_server.api_key)
    provider = OpenAIProvider(
        model_server.base_url, [model_server.model], api_key_env="HOOKCHAT_TEST_MODEL_KEY", timeout=60
    )
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
        assert len(deltas) > 1 and final is not None
        assert final.text_response == "".join(deltas) and final.text_response.strip()
    finally:
        await provider.aclose()


async def test_wrong_api_key_is_reported_without_the_key(model_server):
    provider = OpenAIProvider(model_server.base_url, [model_server.model], api_key="sk-wrong-4242", max_retries=0)
    try:
        with pytest.raises(ProviderError, match="HTTP 401") as caught:
            await provider.complete(request("Hello"))
        assert "sk-wrong-4242" not in str(caught.value)
    finally:
        await provider.aclose()


@pytest.mark.parametrize("stream", [False, True])
async def test_a_tool_call_from_the_real_model_arrives_as_a_tool_call(model_server, weather_request, stream):
    provider = OpenAIProvider(model_server.base_url, [model_server.model], api_key=model_server.api_key)
    try:
        if stream:
            resp = [e.response async for e in provider.stream(weather_request) if e.response is not None][0]
        else:
            resp = await provider.complete(weather_request)
    finally:
        await provider.aclose()
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert resp.finish_reason == "tool_calls"
