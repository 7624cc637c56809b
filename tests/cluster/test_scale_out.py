"""A gateway, workers in their own processes and a NATS server, all on loopback: messages of many sessions are
answered exactly once and in order while workers are killed with SIGKILL and the server restarts; a hung plugin
stalls only its own worker's partitions. The gateway runs in the test, on the testing kit's `RecordingAdapter`."""

from __future__ import annotations

import asyncio
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

from core.chat import KiraIMMessage, MessageChain, Session, User
from core.chat.message_elements import Text
from core.cluster import ClusterHistory, Gateway, Worker, cluster_status, owner_of, partition_of
from core.config import HookchatConfig, load_config
from core.testing import EchoProvider, RecordingAdapter

pytestmark = [pytest.mark.slow]

MARK = re.compile(r"s(\d+)m(\d+)")


def write_config(tmp_path, nats_url: str, role: str, **cluster) -> Path:
    """A config file for the processes of one `role` (their data directory is `tmp_path / role`)."""
    path = tmp_path / f"{role}.toml"
    settings = {"partitions": 32, "lease_seconds": 5.0, "ack_wait": 8.0, "receipt_timeout": 0, **cluster}
    lines = [f'[data]\ndir = "{tmp_path / role}"', "[trace]\nenabled = false", "[cluster]", f'url = "{nats_url}"']
    lines += [f"{k} = {v!r}" for k, v in settings.items()]
    lines.append("[plugins.config.chat]\nquiet_seconds = 0.3\nflush_messages = 5")
    path.write_text("\n".join(lines).replace("'", '"') + "\n")
    return path


def config_of(path) -> HookchatConfig:
    return load_config(path)


def message(session: int, number: int) -> KiraIMMessage:
    return KiraIMMessage(
        MessageChain([Text(f"s{session}m{number}")]),
        User(f"u{session}"),
        Session("test", "dm", f"u{session}"),
        message_id=f"{session}-{number}",
    )


def answered(adapter: RecordingAdapter) -> dict[int, list[int]]:
    """Per session, the message numbers the replies named, in the order they were sent."""
    seen: dict[int, list[int]] = defaultdict(list)
    for result in adapter.sent:
        for session, number in MARK.findall(result.chain.message_repr):
            seen[int(session)].append(int(number))
    return seen


async def wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def wait_for_progress(count, target: int, stall: float, what: str) -> None:
    """Wait until `count()` reaches `target`, failing only when it has not grown for `stall` seconds (a shared,
    loaded machine is slow, not stuck)."""
    last, since = count(), time.monotonic()
    while last < target:
        await asyncio.sleep(0.2)
        now = count()
        if now > last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > stall:
            raise AssertionError(f"timed out waiting for {what}: {last} of {target}, none more for {stall:.0f} s")


async def stored(config: HookchatConfig, sessions: int) -> dict[int, list[int]]:
    """Per session, the message numbers its stored history holds as user input, in order."""
    reader = Worker(config, provider=EchoProvider(), name="reader", entry_points=False)
    await reader.bus.connect()
    try:
        history: ClusterHistory = reader.history
        out: dict[int, list[int]] = {}
        for s in range(sessions):
            numbers = []
            for turn in await history.list_turns(f"test:dm:u{s}"):
                for m in turn.messages:
                    if m.role == "user":
                        numbers += [int(n) for _, n in MARK.findall(m.content)]
            out[s] = numbers
        return out
    finally:
        await reader.bus.close()


async def run_burst(tmp_path, nats_server, workers, *, kill: bool, restart: bool) -> None:
    """250 sessions x 20 messages (some 8 sessions a partition) through a gateway and three workers; with `kill`,
    two workers die by SIGKILL at random moments and a fourth joins; with `restart`, the NATS server restarts
    mid-burst. Then every message was answered exactly once, in order, and every session's history holds each
    message once, in order."""
    sessions, per_session = 250, 20  # bench/scale.py measures the large numbers; this checks what happens
    worker_config = write_config(tmp_path, nats_server.url, "worker")
    procs = [workers(worker_config, f"w{i}") for i in range(3)]
    for proc in procs:
        proc.wait_ready()
    adapter = RecordingAdapter("test")
    gateway = Gateway(config_of(write_config(tmp_path, nats_server.url, "gateway")), [adapter], name="gw")
    await gateway.start()
    try:
        rng = random.Random(15)
        total = sessions * per_session
        order = [(s, n) for n in range(per_session) for s in range(sessions)]
        kills = (
            {rng.randrange(total // 5, total // 3): procs[0], rng.randrange(total // 2, 2 * total // 3): procs[1]}
            if kill
            else {}
        )
        restart_at = rng.randrange(total // 2, 4 * total // 5) if restart else -1
        for i, (s, n) in enumerate(order):
            if i in kills:
                kills[i].kill()  # SIGKILL: a worker dies mid-burst, holding messages and buffers
            if i == restart_at:
                nats_server.restart()  # the gateway's publishes wait for it; workers reconnect
            await gateway.receive(message(s, n))
        if kill:
            workers(worker_config, "w3").wait_ready()  # the workers left: w2, and a new one

        def answers() -> int:
            seen = answered(adapter)
            return sum(min(len(seen[s]), per_session) for s in range(sessions))

        try:
            await wait_for_progress(answers, total, 45, "every message to be answered")
        except AssertionError:
            seen = answered(adapter)
            missing = {
                s: sorted(set(range(per_session)) - set(seen[s]))
                for s in range(sessions)
                if len(set(seen[s])) < per_session
            }
            raise AssertionError(
                f"{len(missing)} sessions never got answers, e.g. {list(missing.items())[:3]}; "
                f"the workers' logs are in {tmp_path}"
            ) from None
        await asyncio.sleep(3)  # anything sent twice would arrive by now
        seen = answered(adapter)
        wrong = {s: seen[s] for s in range(sessions) if seen[s] != list(range(per_session))}
        assert not wrong, (
            f"{len(wrong)} sessions answered out of order or not exactly once, "
            f"e.g. {list(wrong.items())[:3]}; the workers' logs are in {tmp_path}"
        )
        history = await stored(config_of(worker_config), sessions)
        wrong = {s: history[s] for s in range(sessions) if history[s] != list(range(per_session))}
        assert not wrong, f"{len(wrong)} sessions' history lost or duplicated entries, e.g. {list(wrong.items())[:3]}"
        status = await cluster_status(config_of(worker_config).cluster)
        assert status["lag"] == 0
        alive = {"w2", "w3"} if kill else {"w0", "w1", "w2"}
        assert {w["name"] for w in status["workers"]} == alive
        assert {p["owner"] for p in status["partitions"]} == alive
    finally:
        await gateway.aclose()


@pytest.mark.anyio
async def test_every_message_is_answered_once_in_order_while_workers_are_killed(tmp_path, nats_server, workers):
    await run_burst(tmp_path, nats_server, workers, kill=True, restart=False)


@pytest.mark.anyio
async def test_every_message_is_answered_once_in_order_across_a_nats_server_restart(tmp_path, nats_server, workers):
    await run_burst(tmp_path, nats_server, workers, kill=False, restart=True)


@pytest.mark.anyio
async def test_a_hung_plugin_stalls_only_its_own_workers_partitions(tmp_path, nats_server, workers):
    config = write_config(tmp_path, nats_server.url, "worker")
    # The hung hook must outlast the test: at the default 10 s deadline the engine cancels it, and on a loaded
    # machine the healthy worker's answers can take longer than that (the hung sessions were then answered too).
    config.write_text(config.read_text() + "[deadlines]\nhook_default = 600\n")
    healthy = workers(config, "healthy")
    healthy.wait_ready()
    hung = workers(config, "hung", hang=True)
    hung.wait_ready()
    adapter = RecordingAdapter("test")
    gateway = Gateway(config_of(write_config(tmp_path, nats_server.url, "gateway")), [adapter], name="gw")
    await gateway.start()
    try:
        partitions = 32
        owners = {p: owner_of(p, ["healthy", "hung"]) for p in range(partitions)}
        status_ok = False
        deadline = time.monotonic() + 30
        while not status_ok and time.monotonic() < deadline:  # both own their share before the burst
            status = await cluster_status(config_of(config).cluster)
            status_ok = all(p["owner"] == owners[p["partition"]] for p in status["partitions"])
            await asyncio.sleep(0.3)
        assert status_ok
        on_healthy = [s for s in range(200) if owners[partition_of(f"test:dm:u{s}", partitions)] == "healthy"]
        on_hung = [s for s in range(200) if owners[partition_of(f"test:dm:u{s}", partitions)] == "hung"]
        for n in range(5):
            for s in range(200):
                await gateway.receive(message(s, n))
        await wait_for(
            lambda: all(answered(adapter).get(s) == list(range(5)) for s in on_healthy),
            120,
            "the healthy worker's sessions",
        )
        assert not any(answered(adapter).get(s) for s in on_hung)  # stuck behind the hung hook, not lost
        hung.kill()  # its partitions move, and their messages are redelivered to the healthy worker
        await wait_for(
            lambda: all(answered(adapter).get(s) == list(range(5)) for s in on_hung),
            120,
            "the hung worker's sessions, after it was killed",
        )
    finally:
        await gateway.aclose()


def test_hookchat_status_shows_a_worker_started_by_the_command_and_gone_after_sigterm(tmp_path, nats_server):
    config = write_config(tmp_path, nats_server.url, "cli", name="cli-worker")
    hookchat = [sys.executable, "-m", "core.cli"]
    worker = subprocess.Popen(
        [*hookchat, "run", "--role", "worker", "-c", str(config)],
        stderr=subprocess.PIPE,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])},
    )
    try:
        assert b"worker cli-worker on" in worker.stderr.readline()  # type: ignore[union-attr] - started with stderr=PIPE
        status = subprocess.run([*hookchat, "status", "-c", str(config)], capture_output=True, text=True, timeout=60)
        assert status.returncode == 0, status.stderr
        assert "0 gateway(s), 1 worker(s)" in status.stdout
        assert "worker cli-worker pid" in status.stdout
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(60) == 0  # it left cleanly: partitions handed over, registration removed
        status = subprocess.run(
            [*hookchat, "status", "-c", str(config), "--json"], capture_output=True, text=True, timeout=60
        )
        assert json.loads(status.stdout)["workers"] == []
    finally:
        if worker.poll() is None:
            worker.kill()


def test_hookchat_status_without_a_server_says_where_it_looked(tmp_path):
    config = tmp_path / "hookchat.toml"
    config.write_text('[cluster]\nurl = "nats://127.0.0.1:1"\n')
    status = subprocess.run(
        [sys.executable, "-m", "core.cli", "status", "-c", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=Path(__file__).parents[2],
    )
    assert status.returncode == 2
    assert "cannot reach the NATS server at nats://127.0.0.1:1 ([cluster] url)" in status.stderr
