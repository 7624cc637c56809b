"""The scale-out tests' servers: a NATS server with JetStream (the testing kit's `NatsServer`) on a free loopback
port, and worker processes (`worker_main.py`) started and killed by the tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from core.testing import NatsServer

HERE = Path(__file__).parent


@pytest.fixture
def nats_server(tmp_path):
    with NatsServer(tmp_path / "jetstream") as server:
        yield server


class WorkerProcess:
    """A worker in its own process, killable with SIGKILL."""

    def __init__(self, config: Path, name: str, hang: bool = False, slow: bool = False, stuck: bool = False) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}
        args = [sys.executable, str(HERE / "worker_main.py"), str(config), name]
        args += (["--hang"] if hang else []) + (["--slow"] if slow else []) + (["--stuck"] if stuck else [])
        self.log = config.parent / f"{name}.log"  # what the worker logged (appended to by a restart), for failures
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env)

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()  # type: ignore[union-attr] - started with stdout=PIPE
        if b"ready" not in line:
            raise RuntimeError(f"worker {self.name} did not start (exit {self.proc.poll()})")

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def workers():
    started: list[WorkerProcess] = []

    def start(config: Path, name: str, hang: bool = False, slow: bool = False, stuck: bool = False) -> WorkerProcess:
        worker = WorkerProcess(config, name, hang, slow, stuck)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
