"""`OpenAIProvider`: any OpenAI-compatible chat-completions endpoint, through the official `openai` client, with our
own retries (429, 5xx, connection errors, timeouts; `Retry-After` honoured), failover along an ordered model list,
and real streaming."""

from __future__ import annotations

import base64
import email.utils
import functools
import json
import logging
import os
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

import anyio
import openai

from core.config import ProviderConfig
from core.provider.llm import LLMProvider, LLMRequest, LLMResponse, ProviderError, StreamEvent, TokenUsage, ToolCall

__all__ = ["OpenAIProvider"]

T = TypeVar("T")
_log = logging.getLogger("hookchat.provider")

#: Statuses worth asking again: rate limiting, request timeout, and server-side failures.
RETRYABLE_STATUSES = frozenset({408, 409, 429}) | frozenset(range(500, 600))


class _MalformedReply(Exception):
    """The server answered, but not with a chat completion we can read."""


@dataclass(slots=True)
class _Failure:
    reason: str
    retryable: bool
    retry_after: float | None = None


class OpenAIProvider(LLMProvider):
    """A chat-completions endpoint (OpenAI, vLLM, llama.cpp server, Ollama, OpenRouter ...).

    `models` is an ordered failover list: each model is tried with up to `max_retries` retries (exponential backoff
    from `backoff_base` seconds, capped at `backoff_max`, or the server's `Retry-After`), then the next model; when
    all fail, `ProviderError` says what happened to each. A `Retry-After` above `max_retry_after` seconds ends that
    model's attempts at once instead of keeping the user waiting. Unreadable replies (broken JSON, no `choices`) are
    errors, never text. The API key comes from `api_key` or the environment variable named by `api_key_env`; it never
    appears in `repr`, logs or error messages. One pooled HTTP client serves every call until `aclose()`.
    `stream_usage=True` asks for token usage in streams (`stream_options`), which not every server accepts.

    `sleep` is the coroutine used to wait between attempts; tests replace it to record waits instead of sleeping.
    """

    def __init__(
        self,
        base_url: str | None,
        models: list[str] | str,
        *,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 30.0,
        temperature: float | None = None,
        max_tokens: int | None = None,
        extra_body: dict[str, Any] | None = None,
        stream_usage: bool = False,
        name: str = "openai",
    ) -> None:
        self.models = [models] if isinstance(models, str) else list(models)
        if not self.models or not all(isinstance(m, str) and m for m in self.models):
            raise ValueError("OpenAIProvider needs at least one model name, e.g. models=['gpt-4o-mini']")
        if max_retries < 0 or timeout <= 0:
            raise ValueError("max_retries must be >= 0 and timeout > 0 seconds")
        self.base_url = base_url
        self.name = name
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.extra_body = dict(extra_body or {})
        self.stream_usage = stream_usage
        self.sleep: Callable[[float], Awaitable[None]] = anyio.sleep
        key = _resolve_api_key(api_key, api_key_env)
        self._secret = key
        # Local servers need no key, but the client insists on one; "none" is what they ignore.
        self._client = openai.AsyncOpenAI(base_url=base_url, api_key=key or "none", timeout=timeout, max_retries=0)

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """The endpoint of a `type = "openai"` entry (or a `local` one with a `base_url`): `models` is the failover
        list, `top_p` and `stop` go into `extra_body`, the key is the one `load_config` resolved."""
        return cls(
            base_url=config.base_url,
            models=list(config.models) or ["default"],
            api_key=config.api_key.get_secret_value() if config.api_key else None,
            timeout=config.timeout,
            max_retries=config.max_retries,
            temperature=config.temperature,
            max_tokens=config.max_tokens,
            extra_body=config.model_dump(include={"top_p", "stop"}, exclude_none=True, exclude_defaults=True),
            name=config.name,
        )

    def __repr__(self) -> str:
        return f"OpenAIProvider(name={self.name!r}, base_url={self.base_url!r}, models={self.models!r})"

    @property
    def supports_streaming(self) -> bool:
        """Always True: `stream` sends `stream=True` and yields deltas as they arrive."""
        return True

    async def aclose(self) -> None:
        """Close the pooled HTTP client; the provider cannot be used afterwards."""
        await self._client.close()

    async def complete(self, req: LLMRequest) -> LLMResponse:
        """Answer `req` in one piece, retrying and failing over as described on the class."""
        params = self._params(req)
        started = time.perf_counter()

        async def attempt(model: str) -> LLMResponse:
            raw = await self._client.chat.completions.with_raw_response.create(model=model, **params)
            try:
                data = json.loads(raw.content)
            except ValueError as exc:
                raise _MalformedReply("the reply is not valid JSON") from exc
            return _parse_completion(data, model)

        resp = await self._with_failover(req, attempt)
        resp.time_cost = time.perf_counter() - started
        return resp

    async def stream(self, req: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        """Yield text (and reasoning) deltas as they arrive, then one event carrying the complete response.

        Retries and failover apply only until the first delta is yielded; a stream that breaks after that raises
        `ProviderError` (the text already shown cannot be taken back, so it is not silently restarted).
        """
        params = self._params(req)
        started = time.perf_counter()
        opened = await self._with_failover(req, lambda model: self._open_stream(model, params))
        try:
            for event in opened.first:
                yield event
            while not opened.finished:
                try:
                    with anyio.fail_after(self.timeout):  # a stream that stalls after output began
                        chunk = await opened.stream.__anext__()
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    raise ProviderError(
                        f"{self.name}: the stream from {opened.model!r} stalled for "
                        f"{self.timeout:g} s after output began"
                    ) from None
                except (openai.OpenAIError, ValueError) as exc:
                    raise ProviderError(
                        self._redact(
                            f"{self.name}: the stream from {opened.model!r} broke after "
                            f"output began: {_describe(exc, self.timeout).reason}"
                        )
                    ) from None
                try:
                    text, reasoning = opened.assembler.feed(chunk)
                except _MalformedReply as exc:
                    raise ProviderError(f"{self.name}: malformed stream chunk from {opened.model!r}: {exc}") from None
                if text or reasoning:
                    yield StreamEvent(text=text, reasoning=reasoning)
        finally:
            await opened.stream.close()
        try:
            resp = opened.assembler.response()
        except _MalformedReply as exc:
            raise ProviderError(f"{self.name}: malformed stream from {opened.model!r}: {exc}") from None
        resp.time_cost = time.perf_counter() - started
        yield StreamEvent(response=resp)

    async def _open_stream(self, model: str, params: dict[str, Any]) -> _OpenedStream:
        """Start a stream and read it up to its first delta, so that failures before any output can be retried."""
        if self.stream_usage:
            params = {**params, "stream_options": {"include_usage": True}}
        stream = await self._client.chat.completions.create(model=model, stream=True, **params)
        opened = _OpenedStream(model=model, stream=stream, assembler=_StreamAssembler(model))
        try:
            while True:
                try:
                    chunk = await stream.__anext__()
                except StopAsyncIteration:
                    opened.finished = True
                    return opened
                text, reasoning = opened.assembler.feed(chunk)
                if text or reasoning:
                    opened.first.append(StreamEvent(text=text, reasoning=reasoning))
                    return opened
        except BaseException:
            await stream.close()
            raise

    def _params(self, req: LLMRequest) -> dict[str, Any]:
        """The chat.completions arguments for `req`, except the model."""
        params: dict[str, Any] = {"messages": req.to_openai_messages()}
        if req.tool_set:
            params["tools"] = req.tool_set.to_openai()
            choice: Any = req.tool_choice
            if choice not in ("auto", "none", "required") and choice in req.tool_set:
                choice = {"type": "function", "function": {"name": choice}}
            params["tool_choice"] = choice
        temperature = req.temperature if req.temperature is not None else self.temperature
        if temperature is not None:
            params["temperature"] = temperature
        max_tokens = req.max_tokens if req.max_tokens is not None else self.max_tokens
        if max_tokens is not None:
            params["max_tokens"] = max_tokens
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    async def _with_failover(self, req: LLMRequest, attempt: Callable[[str], Awaitable[T]]) -> T:
        """Run `attempt(model)` for each model in turn, retrying retryable failures; raise `ProviderError` at the end.

        `req.model`, when set, is tried first, then the configured models.
        """
        models = list(dict.fromkeys([req.model, *self.models] if req.model else self.models))
        failures: list[str] = []
        failure: _Failure | None = None
        for model in models:
            for tries in range(1, self.max_retries + 2):
                try:
                    # The client's timeout bounds each read; this bounds the whole attempt, so a server that
                    # trickles bytes or keep-alive comments without ever answering still times out.
                    with anyio.fail_after(self.timeout):
                        return await attempt(model)
                except TimeoutError:
                    failure = _Failure(f"timed out after {self.timeout:g} s", retryable=True)
                except (openai.OpenAIError, _MalformedReply, ValueError) as exc:
                    failure = _describe(exc, self.timeout)
                if not failure.retryable or tries > self.max_retries:
                    failures.append(f"{model!r}: {failure.reason} (attempt {tries} of {self.max_retries + 1})")
                    break
                wait = failure.retry_after
                if wait is None:
                    wait = min(self.backoff_max, self.backoff_base * 2 ** (tries - 1))
                elif wait > self.max_retry_after:
                    failures.append(
                        f"{model!r}: {failure.reason}; the server asks to retry after {wait:.0f} s, "
                        f"more than max_retry_after={self.max_retry_after:g} s"
                    )
                    break
                _log.warning(
                    self._redact(
                        f"{self.name}: model {model!r} failed ({failure.reason}); "
                        f"retry {tries} of {self.max_retries} in {wait:.1f} s"
                    )
                )
                await self.sleep(wait)
            if model != models[-1]:
                _log.warning(self._redact(f"{self.name}: giving up on model {model!r}: {failures[-1]}"))
        raise ProviderError(
            self._redact(f"{self.name}: no model at {self.base_url} could answer: " + "; ".join(failures)),
            public="the model took too long to answer"
            if failure is not None and failure.reason.startswith("timed out")
            else "the model service is unavailable",
        )

    def _redact(self, text: str) -> str:
        """`text` with the API key blotted out, in case a server echoed it back: as is, percent-encoded (any of its
        bytes, up to all of them, in either case of hex digits), or in base64."""
        if not self._secret:
            return text
        secret = self._secret
        text = _percent_forms(secret).sub("***", text)
        for form in (
            base64.b64encode(secret.encode()).decode().rstrip("="),
            base64.urlsafe_b64encode(secret.encode()).decode().rstrip("="),
        ):
            text = text.replace(form, "***")
        return text


@functools.lru_cache(maxsize=8)
def _percent_forms(secret: str) -> re.Pattern[str]:
    """A pattern matching `secret` with any of its UTF-8 bytes written as `%XX` (`%6b`, `%6B`) or as itself."""

    def hex_digit(value: int) -> str:
        return f"[{value:x}{value:X}]" if value > 9 else str(value)

    parts = []
    for char in secret:
        encoded = "".join(f"%{hex_digit(byte >> 4)}{hex_digit(byte & 15)}" for byte in char.encode())
        parts.append(f"(?:{re.escape(char)}|{encoded})")
    return re.compile("".join(parts))


@dataclass(slots=True)
class _OpenedStream:
    model: str
    stream: Any
    assembler: _StreamAssembler
    first: list[StreamEvent] = field(default_factory=list)
    finished: bool = False


class _StreamAssembler:
    """Builds the complete `LLMResponse` from streamed chunks, reassembling tool calls from their deltas."""

    def __init__(self, model: str) -> None:
        self.model = model
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: list[dict[str, Any]] = []  # in order of appearance
        self._call_at: dict[Any, dict[str, Any]] = {}  # the call each delta index currently adds to
        self.usage = TokenUsage()
        self.finish_reason = ""
        self.saw_choices = False

    def feed(self, chunk: Any) -> tuple[str, str]:
        """Take one chunk; return its (text, reasoning) deltas."""
        try:
            data = chunk.to_dict(warnings=False) if hasattr(chunk, "to_dict") else chunk
        except Exception as exc:  # the SDK builds chunks leniently; dumping a mangled one can fail in many ways
            raise _MalformedReply(f"unreadable stream chunk ({type(exc).__name__})") from exc
        if not isinstance(data, dict):
            raise _MalformedReply("a stream chunk is not a JSON object")
        if data.get("usage"):
            self.usage = _parse_usage(data["usage"])
        self.model = data.get("model") or self.model
        choices = data.get("choices")
        if choices is None:
            return "", ""
        if not isinstance(choices, list):
            raise _MalformedReply("'choices' is not a list")
        self.saw_choices = True
        if not choices:
            return "", ""
        choice = choices[0]
        delta = choice.get("delta") if isinstance(choice, dict) else None
        if not isinstance(choice, dict) or not isinstance(delta, dict):
            raise _MalformedReply("a stream chunk has no 'delta' object")
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        text = _text_of(delta.get("content"))
        reasoning = _text_of(delta.get("reasoning_content") or delta.get("reasoning"))
        for position, call in enumerate(delta.get("tool_calls") or []):
            self._add_call_delta(position, call)
        self.text.append(text)
        self.reasoning.append(reasoning)
        return text, reasoning

    def _add_call_delta(self, position: int, call: Any) -> None:
        if not isinstance(call, dict):
            raise _MalformedReply("a tool-call delta is not an object")
        index = call.get("index", position)
        call_id = call.get("id") or ""
        slot = self._call_at.get(index)
        if slot is None or (call_id and slot["id"] and call_id != slot["id"]):
            # A new call; some servers send every parallel call whole at the same index, told apart by id.
            slot = self._call_at[index] = {"id": "", "name": "", "arguments": []}
            self.calls.append(slot)
        function = call.get("function") or {}
        slot["id"] = slot["id"] or call_id
        slot["name"] = slot["name"] or function.get("name") or ""
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            arguments = json.dumps(arguments, ensure_ascii=False)
        slot["arguments"].append(arguments or "")

    def response(self) -> LLMResponse:
        """The complete response once the stream has ended."""
        if not self.saw_choices:
            raise _MalformedReply("the stream carried no 'choices'")
        calls = [_tool_call(slot["name"], "".join(slot["arguments"]), slot["id"]) for slot in self.calls]
        return LLMResponse(
            text_response="".join(self.text),
            reasoning_content="".join(self.reasoning),
            tool_calls=calls,
            usage=self.usage,
            model=self.model,
            finish_reason=self.finish_reason,
        )


def _resolve_api_key(api_key: str | None, api_key_env: str | None) -> str | None:
    if api_key is not None:
        return api_key
    if api_key_env is None:
        return None
    value = os.environ.get(api_key_env)
    if not value:
        raise ProviderError(f"the environment variable {api_key_env} is not set: export it with your API key")
    return value


def _describe(exc: BaseException, timeout: float) -> _Failure:
    """Classify an attempt's failure: a short reason, whether to retry, and the server's Retry-After."""
    if isinstance(exc, openai.APITimeoutError):
        return _Failure(f"timed out after {timeout:g} s", retryable=True)
    if isinstance(exc, openai.APIConnectionError):
        return _Failure(f"connection failed ({exc.message})", retryable=True)
    if isinstance(exc, openai.APIStatusError):
        detail = _error_detail(exc.body)
        reason = f"HTTP {exc.status_code}" + (f": {detail}" if detail else "")
        return _Failure(reason, exc.status_code in RETRYABLE_STATUSES, _retry_after(exc.response.headers))
    if isinstance(exc, _MalformedReply):
        return _Failure(f"malformed reply: {exc}", retryable=False)
    if isinstance(exc, ValueError):
        return _Failure("malformed reply: invalid JSON", retryable=False)
    return _Failure(f"{type(exc).__name__}: {str(exc)[:200]}", retryable=False)


def _error_detail(body: object) -> str:
    """The server's error message, shortened; bodies can be whole HTML pages."""
    if isinstance(body, dict):
        error = body.get("error", body)
        body = error.get("message", error) if isinstance(error, dict) else error
    text = " ".join(str(body).split()) if body is not None else ""
    return text[:200]


def _retry_after(headers: Any) -> float | None:
    """Seconds the server asks us to wait (`retry-after-ms`, `retry-after` as seconds or an HTTP date), or None."""
    if value := headers.get("retry-after-ms"):
        try:
            return max(0.0, float(value) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _text_of(content: Any) -> str:
    """Message content as text: a string, None, or a list of `{"type": "text", "text": ...}` parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
    raise _MalformedReply(f"content is a {type(content).__name__}, not text")


def _tool_call(name: Any, raw_arguments: Any, call_id: Any) -> ToolCall:
    """A `ToolCall` from the wire form. Arguments that are not a JSON object become `{}` with `raw_arguments` kept,
    so the agent loop's validation reports the problem to the model instead of the turn failing here."""
    if not isinstance(name, str) or not name:
        raise _MalformedReply("a tool call has no function name")
    if isinstance(raw_arguments, dict):
        raw_arguments = json.dumps(raw_arguments, ensure_ascii=False)
    raw = raw_arguments if isinstance(raw_arguments, str) else ""
    try:
        parsed = json.loads(raw) if raw.strip() else {}
    except ValueError:
        parsed = {}
    call = ToolCall(name=name, arguments=parsed if isinstance(parsed, dict) else {}, raw_arguments=raw)
    if isinstance(call_id, str) and call_id:
        call.id = call_id
    return call


def _parse_usage(usage: Any) -> TokenUsage:
    if not isinstance(usage, dict):
        return TokenUsage()
    return TokenUsage(int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0))


def _parse_completion(data: Any, model: str) -> LLMResponse:
    """An `LLMResponse` from a chat.completion JSON object; `_MalformedReply` when it is not one."""
    if not isinstance(data, dict):
        raise _MalformedReply("the reply is not a JSON object")
    if data.get("error"):
        raise _MalformedReply(f"the server answered with an error: {_error_detail(data)}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _MalformedReply("the reply has no 'choices'")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _MalformedReply("the first choice has no 'message' object")
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict):
            raise _MalformedReply("a tool call has no 'function' object")
        calls.append(_tool_call(function.get("name"), function.get("arguments"), call.get("id")))
    return LLMResponse(
        text_response=_text_of(message.get("content")),
        reasoning_content=_text_of(message.get("reasoning_content") or message.get("reasoning")),
        tool_calls=calls,
        usage=_parse_usage(data.get("usage")),
        model=str(data.get("model") or model),
        finish_reason=str(choices[0].get("finish_reason") or ""),
    )
