"""`OpenAIProvider` against a scriptable OpenAI-compatible server on loopback: request mapping, retries, Retry-After,
timeouts, failover, malformed replies, secrecy of the API key, and streaming with tool-call deltas."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from core.provider import LLMRequest, ProviderError, StreamEvent
from core.provider.openai_provider import OpenAIProvider
from core.utils.tool_utils import BaseTool

pytestmark = pytest.mark.anyio

SECRET = "sk-test-7d1f00c0ffee"


# --- a scriptable server ------------------------------------------------------------------------------------------


@dataclass
class Reply:
    """One scripted answer: a status with a JSON or raw body, or an SSE stream of `events`; after `delay` seconds."""

    status: int = 200
    json: Any = None
    raw: str | None = None
    headers: dict[str, str] = field(default_factory=dict)
    events: list[Any] | None = None
    delay: float = 0.0


@dataclass
class Recorded:
    """A request the server received; `client_port` tells connections apart."""

    body: dict[str, Any]
    headers: dict[str, str]
    client_port: int


def completion(text: str | None = "hello", *, model: str = "m", **message: Any) -> dict[str, Any]:
    """A chat.completion body; `message` adds fields to the assistant message (tool_calls, reasoning_content)."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text, **message},
                "finish_reason": "tool_calls" if "tool_calls" in message else "stop",
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
    }


def chunk(finish_reason: str | None = None, **delta: Any) -> dict[str, Any]:
    """A chat.completion.chunk body carrying one delta."""
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


class FakeOpenAI:
    """`/v1/chat/completions` answered by `respond(body) -> Reply` (default: a completion saying "hello")."""

    def __init__(self) -> None:
        self.base_url = ""
        self.closing = False
        self.reset()

    def reset(self) -> None:
        """Forget the requests and go back to the default answer."""
        self.requests: list[Recorded] = []
        self.respond: Callable[[dict[str, Any]], Reply] = lambda body: Reply(json=completion(model=body["model"]))

    def script(self, *replies: Reply) -> None:
        """Answer with `replies` in order; the last one answers every later request too."""
        queue = list(replies)
        self.respond = lambda body: queue.pop(0) if len(queue) > 1 else queue[0]

    def models(self) -> list[str]:
        """The model each request asked for, in order."""
        return [r.body.get("model", "") for r in self.requests]

    async def chat(self, request: Request) -> Response:
        body = await request.json()
        self.requests.append(Recorded(body, dict(request.headers), request.client.port if request.client else 0))
        reply = self.respond(body)
        deadline = anyio.current_time() + reply.delay
        while anyio.current_time() < deadline and not self.closing:  # slow replies end early at teardown
            await anyio.sleep(0.02)
        if reply.events is not None:
            return StreamingResponse(_sse(reply.events), reply.status, reply.headers, "text/event-stream")
        text = reply.raw if reply.raw is not None else json.dumps(reply.json)
        return Response(text, reply.status, reply.headers, "application/json")


async def _sse(events: list[Any]) -> AsyncIterator[str]:
    for event in events:
        yield f"data: {event if isinstance(event, str) else json.dumps(event)}\n\n"
    yield "data: [DONE]\n\n"


@pytest.fixture(scope="module")
def server() -> Iterator[FakeOpenAI]:
    """A `FakeOpenAI` on uvicorn in a background thread, on a free 127.0.0.1 port, for the whole module."""
    fake = FakeOpenAI()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    app = Starlette(routes=[Route("/v1/chat/completions", fake.chat, methods=["POST"])])
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the fake server did not start"
        time.sleep(0.01)
    fake.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    yield fake
    fake.closing = server.should_exit = True
    thread.join(10)
    sock.close()


@pytest.fixture
def fake(server: FakeOpenAI) -> FakeOpenAI:
    """The module's server with a fresh script and request log."""
    server.reset()
    return server


class Waits(list):
    """Stands in for `provider.sleep`: records each wait instead of sleeping."""

    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


@pytest.fixture
async def make(fake: FakeOpenAI) -> AsyncIterator[Callable[..., OpenAIProvider]]:
    """Builds providers pointed at `fake` whose waits are recorded in `provider.sleep`; closes them afterwards."""
    made: list[OpenAIProvider] = []

    def build(models: list[str] | str = "m", **kwargs: Any) -> OpenAIProvider:
        kwargs.setdefault("max_retries", 2)
        provider = OpenAIProvider(fake.base_url, models, **kwargs)
        provider.sleep = Waits()
        made.append(provider)
        return provider

    yield build
    for provider in made:
        await provider.aclose()


class Weather(BaseTool):
    name = "weather"
    description = "Weather for a city"
    parameters = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def request(text: str = "hi", **kwargs: Any) -> LLMRequest:
    req = LLMRequest(user_prompt=text, **kwargs)
    req.get_prompt("role").content = "You are a test bot."
    return req


async def collect(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in stream]


# --- mapping --------------------------------------------------------------------------------------------------------


async def test_complete_sends_the_request_and_maps_the_answer(fake, make):
    fake.script(Reply(json=completion("<msg><text>hi</text></msg>", model="m-2024", reasoning_content="think")))
    provider = make("m", temperature=0.3, max_tokens=50)

    resp = await provider.complete(request())

    sent = fake.requests[0].body
    assert sent["model"] == "m"
    assert sent["messages"] == [{"role": "system", "content": "You are a test bot."}, {"role": "user", "content": "hi"}]
    assert (sent["temperature"], sent["max_tokens"]) == (0.3, 50)
    assert "tools" not in sent and "tool_choice" not in sent
    assert resp.text_response == "<msg><text>hi</text></msg>"
    assert resp.reasoning_content == "think"
    assert (resp.model, resp.finish_reason) == ("m-2024", "stop")
    assert (resp.usage.prompt_tokens, resp.usage.completion_tokens) == (7, 3)
    assert resp.time_cost > 0


async def test_tools_are_offered_and_tool_calls_parsed(fake, make):
    calls = [
        {"id": "call_1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}},
        {"id": "call_2", "type": "function", "function": {"name": "weather", "arguments": '{"city": '}},
    ]
    fake.script(Reply(json=completion(None, tool_calls=calls)))
    req = request(temperature=0.0, max_tokens=9)
    req.tool_set.add(Weather())

    resp = await make().complete(req)

    sent = fake.requests[0].body
    assert sent["tools"] == [Weather().to_openai()] and sent["tool_choice"] == "auto"
    assert (sent["temperature"], sent["max_tokens"]) == (0.0, 9)
    assert resp.text_response == "" and resp.finish_reason == "tool_calls"
    good, bad = resp.tool_calls
    assert (good.id, good.name, good.arguments, good.raw_arguments) == (
        "call_1",
        "weather",
        {"city": "Oslo"},
        '{"city": "Oslo"}',
    )
    # Invalid JSON arguments: kept raw for the agent loop's validation to report, parsed as {}.
    assert (bad.id, bad.arguments, bad.raw_arguments) == ("call_2", {}, '{"city": ')


async def test_one_pooled_connection_serves_every_call(fake, make):
    provider = make()
    for _ in range(3):
        await provider.complete(request())
    assert len({r.client_port for r in fake.requests}) == 1
    await provider.aclose()
    assert provider._client.is_closed()


# --- retries, Retry-After, timeouts, failover --------------------------------------------------------------------


async def test_retries_5xx_with_exponential_backoff_then_succeeds(fake, make):
    fake.script(Reply(500, {"error": {"message": "boom"}}), Reply(502, raw="bad gateway"), Reply(json=completion("ok")))
    provider = make(max_retries=3, backoff_base=0.5)

    resp = await provider.complete(request())

    assert resp.text_response == "ok"
    assert len(fake.requests) == 3
    assert provider.sleep == [0.5, 1.0]


async def test_429_honours_retry_after_in_seconds(fake, make):
    fake.script(
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "0"}),
        Reply(429, {"error": {"message": "slow down"}}, headers={"Retry-After": "3"}),
        Reply(json=completion("ok")),
    )
    provider = make(max_retries=2)

    assert (await provider.complete(request())).text_response == "ok"
    assert len(fake.requests) == 3
    assert provider.sleep == [0.0, 3.0]


async def test_429_honours_retry_after_as_an_http_date(fake, make):
    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    fake.script(Reply(429, headers={"Retry-After": when}), Reply(json=completion("ok")))
    provider = make()

    assert (await provider.complete(request())).text_response == "ok"
    [wait] = provider.sleep
    assert 15 < wait <= 20


async def test_retry_after_beyond_the_cap_fails_over_without_waiting(fake, make):
    fake.respond = lambda body: (
        Reply(429, headers={"Retry-After": "3600"}) if body["model"] == "a" else Reply(json=completion("from b"))
    )
    provider = make(["a", "b"], max_retry_after=30)

    assert (await provider.complete(request())).text_response == "from b"
    assert fake.models() == ["a", "b"]
    assert provider.sleep == []


async def test_exhausted_retries_raise_provider_error(fake, make):
    fake.script(Reply(503, {"error": {"message": "overloaded"}}))
    provider = make(max_retries=2)

    with pytest.raises(ProviderError) as caught:
        await provider.complete(request())

    assert len(fake.requests) == 3
    assert "HTTP 503: overloaded" in str(caught.value) and "attempt 3 of 3" in str(caught.value)


async def test_timeout_raises_provider_error(fake, make):
    fake.script(Reply(json=completion("too late"), delay=2.0))
    provider = make(timeout=0.2, max_retries=1)

    with pytest.raises(ProviderError, match="timed out after 0.2 s"):
        await provider.complete(request())

    assert len(fake.requests) == 2
    assert len(provider.sleep) == 1


async def test_connection_refused_is_retried_then_reported(make):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once the socket closes
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", ["m"], max_retries=1)
    provider.sleep = Waits()
    try:
        with pytest.raises(ProviderError, match="connection failed"):
            await provider.complete(request())
        assert provider.sleep == [0.5]
    finally:
        await provider.aclose()


async def test_fails_over_to_the_next_model(fake, make):
    fake.respond = lambda body: Reply(500) if body["model"] == "a" else Reply(json=completion("b here", model="b"))
    provider = make(["a", "b"], max_retries=1)

    resp = await provider.complete(request())

    assert (resp.text_response, resp.model) == ("b here", "b")
    assert fake.models() == ["a", "a", "b"]


async def test_request_model_is_tried_before_the_configured_list(fake, make):
    await make(["a", "b"]).complete(request(model="special"))
    assert fake.models() == ["special"]


async def test_client_errors_are_not_retried_but_fail_over(fake, make):
    fake.respond = lambda body: (
        Reply(404, {"error": {"message": f"no model {body['model']}"}})
        if body["model"] == "a"
        else Reply(json=completion("fine"))
    )
    provider = make(["a", "b"])

    assert (await provider.complete(request())).text_response == "fine"
    assert fake.models() == ["a", "b"]


async def test_every_model_failing_names_each_failure(fake, make):
    fake.respond = lambda body: Reply(500, {"error": {"message": f"{body['model']} is down"}})
    provider = make(["a", "b"], max_retries=0)

    with pytest.raises(ProviderError) as caught:
        await provider.complete(request())

    message = str(caught.value)
    assert "'a': HTTP 500: a is down" in message and "'b': HTTP 500: b is down" in message


# --- malformed replies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        Reply(raw='{"choices": [{"message": {"content": "I am brok'),
        Reply(raw="<html>502 Bad Gateway</html>"),
        Reply(json={"object": "list", "data": []}),
        Reply(json={"choices": []}),
        Reply(json={"choices": [{"message": {"content": 42}}]}),
        Reply(json={"error": {"message": "model crashed"}}),
    ],
    ids=["truncated-json", "html", "no-choices", "empty-choices", "content-not-text", "error-with-200"],
)
async def test_malformed_replies_raise_and_never_become_text(fake, make, reply):
    fake.script(reply)
    provider = make(["a", "b"])

    with pytest.raises(ProviderError, match="malformed reply") as caught:
        await provider.complete(request())

    assert fake.models() == ["a", "b"]  # not retried on the same model, but the next model is tried
    assert "I am brok" not in str(caught.value)


# --- the API key ---------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("status", [401, 503])
async def test_api_key_from_the_environment_is_sent_but_never_shown(fake, make, monkeypatch, caplog, status):
    monkeypatch.setenv("HOOKCHAT_TEST_KEY", SECRET)
    fake.script(Reply(status, {"error": {"message": f"Incorrect API key provided: {SECRET}"}}))
    provider = make(["a", "b"], api_key_env="HOOKCHAT_TEST_KEY", max_retries=1)

    with caplog.at_level("WARNING", logger="hookchat.provider"), pytest.raises(ProviderError) as caught:
        await provider.complete(request())

    assert fake.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert f"HTTP {status}" in str(caught.value) and "Incorrect API key provided: ***" in str(caught.value)
    assert SECRET not in str(caught.value) and SECRET not in repr(caught.value)
    assert SECRET not in repr(provider) and SECRET not in str(provider)
    assert caplog.records and SECRET not in caplog.text


async def test_missing_api_key_variable_is_named():
    with pytest.raises(ProviderError, match="HOOKCHAT_UNSET_KEY is not set"):
        OpenAIProvider("http://127.0.0.1:9/v1", ["m"], api_key_env="HOOKCHAT_UNSET_KEY")


# --- streaming ----------------------------------------------------------------------------------------------------


async def test_stream_yields_deltas_then_the_complete_response(fake, make):
    fake.script(
        Reply(
            events=[
                chunk(role="assistant"),
                chunk(reasoning_content="hm"),
                chunk(content="Hel"),
                chunk(content="lo"),
                chunk("stop"),
            ]
        )
    )
    provider = make()

    events = await collect(provider.stream(request()))

    assert fake.requests[0].body["stream"] is True
    assert [(e.text, e.reasoning) for e in events[:-1]] == [("", "hm"), ("Hel", ""), ("lo", "")]
    resp = events[-1].response
    assert (resp.text_response, resp.reasoning_content, resp.finish_reason) == ("Hello", "hm", "stop")
    assert provider.supports_streaming


async def test_stream_usage_is_requested_and_read_when_enabled(fake, make):
    usage_chunk = {**chunk(), "choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 2}}
    fake.script(Reply(events=[chunk(content="ok"), chunk("stop"), usage_chunk]))

    events = await collect(make(stream_usage=True).stream(request()))

    assert fake.requests[0].body["stream_options"] == {"include_usage": True}
    usage = events[-1].response.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (11, 2)


async def test_stream_reassembles_tool_calls_from_deltas(fake, make):
    def call(index: int, **fields: Any) -> dict[str, Any]:
        return {"index": index, **fields}

    fake.script(
        Reply(
            events=[
                chunk(role="assistant", content=None),
                chunk(
                    tool_calls=[call(0, id="call_a", type="function", function={"name": "weather", "arguments": ""})]
                ),
                chunk(tool_calls=[call(0, function={"arguments": '{"ci'})]),
                chunk(
                    tool_calls=[call(1, id="call_b", type="function", function={"name": "weather", "arguments": '{"c'})]
                ),
                chunk(tool_calls=[call(0, function={"arguments": 'ty": "Oslo"}'})]),
                chunk(tool_calls=[call(1, function={"arguments": 'ity": "Rome"}'})]),
                chunk("tool_calls"),
            ]
        )
    )
    req = request()
    req.tool_set.add(Weather())

    events = await collect(make().stream(req))

    assert len(events) == 1  # no text: only the final response
    resp = events[0].response
    assert resp.finish_reason == "tool_calls"
    assert [(c.id, c.name, c.arguments) for c in resp.tool_calls] == [
        ("call_a", "weather", {"city": "Oslo"}),
        ("call_b", "weather", {"city": "Rome"}),
    ]
    assert resp.tool_calls[1].raw_arguments == '{"city": "Rome"}'


async def test_stream_retries_before_the_first_delta(fake, make):
    fake.script(Reply(500), Reply(events=[chunk(role="assistant"), chunk(content="ok"), chunk("stop")]))
    provider = make()

    events = await collect(provider.stream(request()))

    assert events[-1].response.text_response == "ok"
    assert len(fake.requests) == 2 and provider.sleep == [0.5]


async def test_stream_with_broken_json_before_output_raises(fake, make):
    fake.script(Reply(events=[chunk(role="assistant"), '{"choices": [{"delta": {"content": "I am brok']))
    provider = make(max_retries=2)

    with pytest.raises(ProviderError, match="malformed reply"):
        await collect(provider.stream(request()))

    assert len(fake.requests) == 1


async def test_stream_breaking_after_output_raises_without_retrying(fake, make):
    fake.script(Reply(events=[chunk(content="partial"), "{not json"]))
    provider = make()
    seen: list[str] = []

    with pytest.raises(ProviderError, match="broke after output began"):
        async for event in provider.stream(request()):
            seen.append(event.text)

    assert seen == ["partial"]
    assert len(fake.requests) == 1


async def test_stream_fails_over_before_output(fake, make):
    fake.respond = lambda body: (
        Reply(503) if body["model"] == "a" else Reply(events=[chunk(content="from b"), chunk("stop")])
    )
    provider = make(["a", "b"], max_retries=0)

    events = await collect(provider.stream(request()))

    assert events[-1].response.text_response == "from b"
    assert fake.models() == ["a", "b"]


async def test_parallel_calls_sent_whole_at_one_index_stay_apart(fake, make):
    fake.script(
        Reply(
            events=[
                chunk(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "call_0",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ]
                ),
                chunk(
                    tool_calls=[
                        {
                            "index": 0,
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "weather", "arguments": '{"city": "Rome"}'},
                        }
                    ]
                ),
                chunk("tool_calls"),
            ]
        )
    )
    req = request()
    req.tool_set.add(Weather())

    resp = (await collect(make().stream(req)))[-1].response

    assert [(c.id, c.arguments) for c in resp.tool_calls] == [
        ("call_0", {"city": "Oslo"}),
        ("call_1", {"city": "Rome"}),
    ]


async def test_a_server_that_sends_keep_alives_but_never_answers_times_out():
    """SSE comments keep every single read under the client's read timeout; the deadline on the whole attempt
    still ends it."""
    import asyncio

    from core.provider.openai_provider import OpenAIProvider

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n")
        try:
            for _ in range(50):  # bounded: at most 5 s
                writer.write(b"e\r\n: processing\n\n\r\n")  # one chunk: an SSE comment
                await writer.drain()
                await asyncio.sleep(0.1)
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(keep_alive, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    provider = OpenAIProvider(f"http://127.0.0.1:{port}/v1", ["m"], api_key="k", timeout=0.5, max_retries=0)
    try:
        with pytest.raises(ProviderError, match="timed out after 0.5 s"):
            async for _ in provider.stream(request()):
                pass
    finally:
        await provider.aclose()
        server.close()
