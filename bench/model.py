"""Benchmark of the embedded model through `LocalLlamaProvider` against `xllamacpp` called directly, in the same run:
load time, time to first token and tokens per second while streaming, for each thread count. Runs alternate between
the two (same prompt, greedy decoding, same server settings), so a change in machine load hits both alike.
Run: `.venv/bin/python bench/model.py [--runs 15] [--max-tokens 64] [--threads 1 2]`."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import anyio
import xllamacpp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.provider import LLMRequest
from core.provider.local import _PROMPT_BATCH, TOOLS_CHAT_TEMPLATE, LocalLlamaProvider, default_model_path

PROMPT = "Write a short story about a lighthouse keeper."


def request(max_tokens: int) -> LLMRequest:
    req = LLMRequest(user_prompt=PROMPT, max_tokens=max_tokens, temperature=0.0)
    req.get_prompt("role").content = "You are a helpful assistant."
    return req


def direct_server(threads: int, context_tokens: int) -> xllamacpp.Server:
    """The server the provider starts, built by hand: same model, window, batches, threads and template."""
    params = xllamacpp.CommonParams()
    params.model.path = str(default_model_path())
    params.n_ctx, params.n_parallel = context_tokens, 1
    params.n_batch = params.n_ubatch = _PROMPT_BATCH
    params.cpuparams.n_threads = params.cpuparams_batch.n_threads = threads
    params.warmup, params.verbosity, params.chat_template = False, -1, TOOLS_CHAT_TEMPLATE
    params.n_threads_http, params.ui, params.endpoint_slots = 1, False, False
    return xllamacpp.Server(params)


def direct_run(server: xllamacpp.Server, max_tokens: int) -> list[float]:
    """Times (from the call) at which each piece of text arrived, calling the server in this thread."""
    req = request(max_tokens)
    body = json.dumps(
        {
            "messages": req.to_openai_messages(),
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "seed": 1,
            "stream": True,
            "return_progress": True,
        }
    )
    stamps: list[float] = []

    def on_chunk(data: str) -> bool:
        choices = json.loads(data).get("choices") or [{}]
        if (choices[0].get("delta") or {}).get("content"):
            stamps.append(time.perf_counter() - started)
        return False

    started = time.perf_counter()
    server.handle_chat_completions(body, on_chunk)
    return stamps


async def provider_run(provider: LocalLlamaProvider, max_tokens: int) -> list[float]:
    stamps: list[float] = []
    started = time.perf_counter()
    async for event in provider.stream(request(max_tokens)):
        if event.text:
            stamps.append(time.perf_counter() - started)
    return stamps


class StallMeter:
    """The longest the event loop went without running a 1 ms ticker task (what a blocked loop looks like)."""

    def __init__(self) -> None:
        self.longest = 0.0

    async def run(self) -> None:
        last = time.perf_counter()
        while True:
            await anyio.sleep(0.001)
            now = time.perf_counter()
            self.longest = max(self.longest, now - last - 0.001)
            last = now


def rate(stamps: list[float]) -> float:
    """Decode speed after the first token."""
    return (len(stamps) - 1) / (stamps[-1] - stamps[0])


async def bench(runs: int, max_tokens: int, threads: int, context_tokens: int) -> None:
    started = time.perf_counter()
    server = direct_server(threads, context_tokens)
    direct_load = time.perf_counter() - started

    provider = LocalLlamaProvider(threads=threads, context_tokens=context_tokens, seed=1)
    load_stall, stream_stall = StallMeter(), StallMeter()
    async with anyio.create_task_group() as tg:
        tg.start_soon(load_stall.run)
        await anyio.sleep(0.01)
        started = time.perf_counter()
        await provider.load()
        provider_load = time.perf_counter() - started
        tg.cancel_scope.cancel()

    direct_stamps, provider_stamps = [], []
    for run in range(runs + 1):  # the first pair warms both up and is not counted; who goes first alternates
        if run % 2:
            provider_stamps.append(await provider_run(provider, max_tokens))
        direct_stamps.append(direct_run(server, max_tokens))
        if not run % 2:
            provider_stamps.append(await provider_run(provider, max_tokens))
    # The ticker wakes the loop every millisecond, which would take CPU from the model: it gets runs of its own.
    async with anyio.create_task_group() as tg:
        tg.start_soon(stream_stall.run)
        for _ in range(3):
            await provider_run(provider, max_tokens)
        tg.cancel_scope.cancel()
    await provider.aclose()
    del server
    pairs = [(d, p) for d, p in zip(direct_stamps[1:], provider_stamps[1:], strict=True) if len(d) > 1 and len(p) > 1]

    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"threads {threads}: {runs} runs of {max_tokens} tokens, greedy, prompt {PROMPT!r}; "
        f"load average now {load_avg:.1f}"
    )
    print(
        f"  load time     direct {direct_load * 1000:.0f} ms, provider {provider_load * 1000:.0f} ms "
        f"(event loop stalled up to {load_stall.longest * 1000:.0f} ms: xllamacpp holds the GIL while loading)"
    )
    if not pairs:
        print("  no run produced two or more pieces of text")
        return
    ttft_d = [d[0] for d, _ in pairs]
    ttft_p = [p[0] for _, p in pairs]
    overhead = statistics.median(p[0] - d[0] for d, p in pairs)
    rate_d = statistics.median(rate(d) for d, _ in pairs)
    rate_p = statistics.median(rate(p) for _, p in pairs)
    ratio = statistics.median(rate(p) / rate(d) for d, p in pairs)
    # On a shared machine noise only adds time, so the fastest runs show the cost itself best.
    print(
        f"  first token   direct median {statistics.median(ttft_d) * 1000:.1f} ms (fastest "
        f"{min(ttft_d) * 1000:.1f}), provider median {statistics.median(ttft_p) * 1000:.1f} ms (fastest "
        f"{min(ttft_p) * 1000:.1f}); overhead: median of pairs {overhead * 1000:+.1f} ms, fastest against "
        f"fastest {(min(ttft_p) - min(ttft_d)) * 1000:+.1f} ms (target < 5 ms)"
    )
    print(
        f"  tokens/s      direct {rate_d:.1f}, provider {rate_p:.1f}; provider/direct median {ratio:.3f}x "
        f"(target >= 0.95x); pieces per run {[len(p) for _, p in pairs]}"
    )
    print(f"  event loop    longest stall over 3 more provider runs, streaming: {stream_stall.longest * 1000:.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--context-tokens", type=int, default=2048)
    args = parser.parse_args()
    path = default_model_path()
    print(
        f"model {path.name} ({path.stat().st_size / 2**20:.0f} MiB), xllamacpp {xllamacpp.__version__}, "
        f"{os.cpu_count()} CPUs"
    )
    for threads in args.threads:
        anyio.run(bench, args.runs, args.max_tokens, threads, args.context_tokens)


if __name__ == "__main__":
    main()
