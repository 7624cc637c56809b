"""Fixtures for provider tests: the anyio backend, and llama-cpp-python's own OpenAI-compatible server serving the
embedded model on loopback (`llama_server`), for tests that talk to a real server over HTTP."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest


@pytest.fixture
def anyio_backend() -> str:
    """Run `@pytest.mark.anyio` tests on asyncio."""
    return "asyncio"


@dataclass(frozen=True)
class LlamaServer:
    """A running llama-cpp-python server: where it listens, the API key it demands and the model alias it serves."""

    base_url: str
    api_key: str
    model: str


# llama-cpp-python's server offers no switch for llama.cpp's extra weight buffers, whose AMX kernels crash in VMs
# that advertise AMX without enabling it (see core/provider/local.py), so it is started with them turned off.
_LAUNCHER = """
import llama_cpp.llama_cpp as lib
original = lib.llama_model_default_params
def patched():
    params = original()
    if hasattr(params, "use_extra_bufts"):
        params.use_extra_bufts = False
    return params
lib.llama_model_default_params = patched
from llama_cpp.server.__main__ import main
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_server() -> Iterator[LlamaServer]:
    """`python -m llama_cpp.server` serving the embedded SmolLM2 model as "smollm2" on a free 127.0.0.1 port.

    Waits until `/v1/models` answers, kills the server after the module's tests. Skips when llama_cpp is missing.
    One thread: llama.cpp's OpenMP workers spin at barriers, and with the test process and other work sharing two
    cores a two-thread server slowed to seconds per token.
    """
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: pip install -e '.[local]'")
    from core.provider.local import default_model_path

    port, key = _free_port(), "sk-llama-test-5f0c1e"
    server = LlamaServer(f"http://127.0.0.1:{port}/v1", key, "smollm2")
    log = tempfile.TemporaryFile()
    proc = subprocess.Popen(
        [sys.executable, "-c", _LAUNCHER, "--model", str(default_model_path()), "--model_alias", server.model,
         "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", "1",
         "--verbose", "False", "--api_key", key],
        stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        deadline = time.monotonic() + 120
        while not _answers(server):
            if proc.poll() is not None or time.monotonic() > deadline:
                log.seek(0)
                raise RuntimeError(f"llama_cpp.server did not come up: {log.read().decode(errors='replace')[-3000:]}")
            time.sleep(0.2)
        yield server
    finally:
        proc.kill()
        proc.wait(10)
        log.close()


def _answers(server: LlamaServer) -> bool:
    try:
        reply = httpx.get(f"{server.base_url}/models", headers={"Authorization": f"Bearer {server.api_key}"},
                          timeout=2)
    except httpx.HTTPError:
        return False
    return reply.status_code == 200
