"""Benchmark of the embedded model through `LocalLlamaProvider`: load time, time to first token and tokens per second
while streaming a short prompt, for each thread count. Run: `.venv/bin/python bench/model.py [--runs 5]
[--max-tokens 64] [--threads 1 2]`."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.provider import LLMRequest  # noqa: E402
from core.provider.local import LocalLlamaProvider, default_model_path  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper."


async def bench(runs: int, max_tokens: int, threads: int) -> None:
    provider = LocalLlamaProvider(n_threads=threads, max_tokens=max_tokens, temperature=0.7, seed=1)
    started = time.perf_counter()
    await provider.load()
    load_time = time.perf_counter() - started

    ttfts, rates, counts = [], [], []
    for _ in range(runs):
        req = LLMRequest(user_prompt=PROMPT)
        req.get_prompt("role").content = "You are a helpful assistant."
        started, stamps = time.perf_counter(), []
        async for event in provider.stream(req):
            if event.text:
                stamps.append(time.perf_counter() - started)
        if len(stamps) < 2:
            continue
        ttfts.append(stamps[0])
        rates.append((len(stamps) - 1) / (stamps[-1] - stamps[0]))  # decode speed, after the first token
        counts.append(len(stamps))
    await provider.aclose()

    load_avg = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"model        {default_model_path().name} ({default_model_path().stat().st_size / 2**20:.0f} MiB), "
          f"{os.cpu_count()} CPUs, load average {load_avg:.1f}")
    print(f"threads      {threads}, runs {runs}, max_tokens {max_tokens}, prompt {PROMPT!r}")
    print(f"load time    {load_time * 1000:.0f} ms")
    if ttfts:
        print(f"first token  median {statistics.median(ttfts) * 1000:.0f} ms "
              f"(min {min(ttfts) * 1000:.0f}, max {max(ttfts) * 1000:.0f})")
        print(f"tokens/s     median {statistics.median(rates):.1f} "
              f"(min {min(rates):.1f}, max {max(rates):.1f}); tokens per run {counts}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    for threads in args.threads:
        anyio.run(bench, args.runs, args.max_tokens, threads)


if __name__ == "__main__":
    main()
