"""Where finished traces go: the bounded in-memory ring, a JSON-lines file written off the event loop (by a process
of its own, fed by a thread), and OpenTelemetry spans when the SDK is installed and asked for."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

import core
from core.trace._spans import HookTable, Trace, expand_rows
from core.trace._writer import FileWriter, Frame, pack

__all__ = ["TraceRing", "JsonLinesSink", "OtelSink", "read_json_lines", "OtelNotInstalledError"]

_log = logging.getLogger("hookchat.trace")


class TraceRing:
    """The last finished traces, by id (messages adopted by a turn are found by their own id too), at most `size`
    of them, a turn counted once per message it answered: a flood's turn of hundreds of messages takes as much
    room as as many one-message turns, so what the ring holds is bounded by messages, not by turns whatever their
    size (the newest trace is kept whatever its size)."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._traces: deque[tuple[Trace, int]] = deque()
        self._by_id: dict[str, Trace] = {}
        self._held = 0  # the weights of the traces in `_traces`

    def add(self, trace: Trace) -> None:
        """Keep `trace`; the oldest ones go while the ring holds more than `size`."""
        weight = len(trace.messages) or 1
        self._traces.append((trace, weight))
        self._held += weight
        self._by_id[trace.id] = trace
        for child in trace.messages:
            self._by_id[child.id] = trace
        while self._held > self.size and len(self._traces) > 1:
            old, weight = self._traces.popleft()
            self._held -= weight
            self._by_id.pop(old.id, None)
            for child in old.messages:
                self._by_id.pop(child.id, None)

    def get(self, trace_id: str) -> Trace | None:
        """The trace with this id (for a message's id: the turn that holds it), or None."""
        return self._by_id.get(trace_id)

    def recent(self, limit: int = 20, kind: str | None = None) -> list[Trace]:
        """The newest traces first, at most `limit`, only of `kind` when given."""
        out: list[Trace] = []
        for trace, _ in reversed(self._traces):
            if kind is None or trace.kind == kind:
                out.append(trace)
                if len(out) >= limit:
                    break
        return out

    def __len__(self) -> int:
        return len(self._traces)


class JsonLinesSink:
    """Appends each finished trace as one JSON line to `path`; at `max_bytes` the file moves to `<path>.1`.

    On the event loop, `write` turns a trace into plain data (`Trace.compact`: its dispatches as their chain's
    number and raw readings) and queues it. A daemon thread owned by the sink takes the queue a batch at a time:
    woken by a finished trace, it first waits `batch_delay` seconds, so it takes the interpreter from the event
    loop once for the traces of that while (a line reaches the file at most that much later). Once `process_after`
    traces were written (None: never), it hands each batch, packed in C (`marshal`), to a writer process of its own
    (`core.trace._child`, started then with this interpreter), which renders the lines, writes them and rotates
    the file on the machine's other core; before that, or if that process cannot start or ends, the thread renders
    and writes them itself (logged once, naming the traces that may be missing). The process ends when its pipe
    does: at `close()`, which drains the queue and waits for it, or when this process ends in any way. At most
    `max_queued` traces wait: past that (a disk slower than the bot) the newest are dropped and counted, with one
    warning, rather than memory growing without bound.

    A line holds `render_compact()`: each dispatch as the number of its chain and one reading per hook (a row
    `[chain, *at]` when its hooks all simply returned), and a model call's system prompt sections seen before as
    their numbers; the chains, hooks and sections described by table
    lines (`{"hooks": {"1": [event, plugin_id, function, file, line, priority, deadline]}, "chains": {"1": [1, 2]},
    "sections": {"1": [name, source, content]}}`) before the first trace that uses them, in each file;
    `read_json_lines` gives the traces back as `Trace.to_dict()` has them.
    """

    def __init__(
        self,
        path: Path,
        max_bytes: int,
        max_queued: int = 10_000,
        batch_delay: float = 0.05,
        process_after: int | None = 100,
    ) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_queued = max_queued
        self.batch_delay = batch_delay
        self.process_after = process_after
        self.dropped = 0
        # A deque and an event rather than a `queue.Queue`: appending takes no lock, and the event is set only when
        # the thread may be waiting for it (once per batch), not at every trace.
        self._queue: deque[Frame | None] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._table = HookTable()  # the event loop's: it numbers the chains
        self._sent = (0, 0)  # the hooks and chains of `_table` the frames so far described
        self._written = 0  # traces handed on by the thread
        self._child: _Child | None = None
        self._writer: FileWriter | None = None  # the thread's own, when there is no writer process
        self._thread_only = False  # once the writer process could not start or ended

    @property
    def writer_pid(self) -> int | None:
        """The writer process's id, None while the thread writes (or before the first batch)."""
        child = self._child
        return child.process.pid if child is not None else None

    def write(self, trace: Trace) -> None:
        """Queue `trace` for writing (dropped, and counted, when `max_queued` traces already wait, or once closed)."""
        if self._closed:
            return
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="hookchat-trace-writer", daemon=True)
                    self._thread.start()
        if len(self._queue) >= self.max_queued:
            if not self.dropped:
                _log.warning("traces are written slower than they come: dropping them from %s", self.path)
            self.dropped += 1
            return
        extras: list[Any] = []
        table = self._table
        try:
            texts, numbers = trace.compact(table, extras)
        except Exception:
            _log.exception("could not serialise trace %s", trace.id)
            return
        hooks, chains = self._sent
        described = None
        if len(table.chains) != chains:
            described = (hooks, table.hooks[hooks:], chains, table.chains[chains:])
            self._sent = (len(table.hooks), len(table.chains))
        self._queue.append((described, texts, numbers, extras))
        if not self._wake.is_set():
            self._wake.set()

    def _take(self) -> list[Frame | None]:
        """The traces queued now, after the batch delay (at most 1,000; the rest wait for the next batch)."""
        self._wake.wait()
        if self.batch_delay > 0 and not self._closed:
            time.sleep(self.batch_delay)
        # Cleared before the queue is emptied: a trace queued after this sets the event again, so none waits for a
        # later one to be written.
        self._wake.clear()
        queued, batch = self._queue, []
        while queued and len(batch) < 1000:
            batch.append(queued.popleft())
        if queued:
            self._wake.set()
        return batch

    def _run(self) -> None:
        try:
            while True:
                batch = self._take()
                frames = [frame for frame in batch if frame is not None]
                try:
                    if frames:
                        self._hand_on(frames)
                except Exception:  # a bug here must not stop the writing of later traces
                    _log.exception("could not write %d trace(s) to %s", len(frames), self.path)
                if None in batch:
                    return
        finally:
            self._stop_writers()

    def _hand_on(self, frames: list[Frame]) -> None:
        """Send `frames` to the writer process (started once `process_after` traces were written), else write them."""
        after = self.process_after
        if self._child is None and not self._thread_only and after is not None and self._written >= after:
            if self._writer is not None:  # one writer of the file at a time
                self._writer.close()
                self._writer = None
            self._child = _Child.start(self.path, self.max_bytes, self._description())
            self._thread_only = self._child is None
        self._written += len(frames)
        child = self._child
        if child is not None:
            try:
                child.send(pack(frames))
                return
            except OSError:
                self._child = None
                self._thread_only = True
                _log.warning(
                    "the trace writer process ended (%s): the traces it had not written yet are missing from %s; "
                    "the writer thread writes them from now",
                    child.ended(),
                    self.path,
                )
        if self._writer is None:
            self._writer = FileWriter(self.path, self.max_bytes)
            self._writer.write([(self._description(), None, None, [])])
        self._writer.write(frames)

    def _description(self) -> tuple[int, list[Any], int, list[Any]]:
        """All the hooks and chains the event loop's table numbered so far, for a writer that starts now."""
        table = self._table
        return (0, list(table.hooks), 0, list(table.chains))

    def _stop_writers(self) -> None:
        child, self._child = self._child, None
        if child is not None:
            code = child.close()
            if code:
                _log.warning("the trace writer process ended with exit code %s; see its errors above", code)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()

    def close(self) -> None:
        """Write what is queued, then stop the thread and the writer process (blocking: call it off the event loop)."""
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.append(None)
            self._wake.set()
            thread.join()


class _Child:
    """The writer process of a `JsonLinesSink` (`python -m core.trace._child`), fed over its stdin."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        self.process = process

    @classmethod
    def start(cls, path: Path, max_bytes: int, described: tuple[int, list[Any], int, list[Any]]) -> _Child | None:
        """A writer process for `path`, told the hooks and chains `described` names; None (logged) when it cannot
        start, so the thread writes."""
        env = dict(os.environ)
        # `core` as this process imports it, wherever it came from (a checkout on sys.path, an installed package),
        # and never a `core` folder in the working directory (`-P`: `-m` would put that first on the path).
        root = str(Path(core.__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
        try:
            process = subprocess.Popen(
                [sys.executable, "-P", "-m", "core.trace._child", str(path), str(max_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=env,
                close_fds=True,
            )
        except OSError as exc:
            _log.warning("could not start the trace writer process (%s): the writer thread writes %s", exc, path)
            return None
        child = cls(process)
        assert process.stdout is not None  # asked for above
        if process.stdout.read(1) != b"r":
            _log.warning(
                "the trace writer process did not start (%s): the writer thread writes %s", child.ended(), path
            )
            child.close()
            return None
        try:
            child.send(pack([(described, None, None, [])]))
        except OSError:
            child.close()
            return None
        return child

    def send(self, parts: tuple[bytes, ...]) -> None:
        """Write a batch's `parts` (`pack`'s) to the process (blocks while its pipe is full; OSError once it ended)."""
        stdin = self.process.stdin
        assert stdin is not None  # asked for in `start`
        stdin.writelines(parts)  # each large part straight to the pipe, none copied into another
        stdin.flush()

    def ended(self) -> str:
        """How the process ended, in words."""
        code = self.process.poll()
        if code is None:
            return "still running"
        return f"killed by signal {-code}" if code < 0 else f"exit code {code}"

    def close(self) -> int:
        """Close its pipe and wait for it to write what it has and end; its exit code."""
        stdin = self.process.stdin
        if stdin is not None:
            try:
                stdin.close()
            except OSError:
                pass  # it ended with data unread: `ended()` says how
        code = self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        return code


def read_json_lines(path: Path, limit: int | None = None) -> list[dict[str, Any]]:
    """The traces written to `path` (and its rotated `<path>.1`), oldest first, as `Trace.to_dict()` gives them;
    the last `limit` when given.

    A line that is not JSON (a crash mid-write) is skipped, with a warning naming the file and line.
    """
    out: list[dict[str, Any]] = []
    for file in (path.with_name(path.name + ".1"), path):
        if not file.is_file():
            continue
        hooks: dict[str, list[Any]] = {}  # the file's tables, as its lines so far describe them
        chains: dict[str, list[int]] = {}
        sections: dict[str, list[str]] = {}
        with file.open(encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    data = json.loads(line)
                except ValueError:
                    _log.warning("%s:%d is not a JSON trace; skipped", file, number)
                    continue
                if "id" not in data and isinstance(data.get("hooks"), dict):
                    hooks.update(data["hooks"])
                    chains.update(data.get("chains") or {})
                    sections.update(data.get("sections") or {})
                    continue
                out.append(_expanded(data, hooks, chains, sections))
    return out[-limit:] if limit else out


def _expanded(
    data: dict[str, Any], hooks: dict[str, list[Any]], chains: dict[str, list[int]], sections: dict[str, list[str]]
) -> dict[str, Any]:
    data["timeline"] = [expand_rows(item, hooks, chains, sections) for item in data.get("timeline", ())]
    for message in data.get("messages", ()):
        _expanded(message, hooks, chains, sections)
    return data


class OtelNotInstalledError(RuntimeError):
    """`[trace] otel = true` but the `opentelemetry-sdk` package is not installed."""


class OtelSink:
    """Exports each finished trace as OpenTelemetry spans: one root span per trace, a child per dispatch (with a
    child per hook), per model call, tool call, tag and send. Uses `provider` (a `TracerProvider`), else the
    globally configured one: configure its exporters as the SDK documents (for example `OTEL_EXPORTER_*`)."""

    def __init__(self, provider: Any = None) -> None:
        try:
            from opentelemetry import (
                trace as otel,  # optional dependency: imported only when asked for
            )
        except ImportError as exc:
            raise OtelNotInstalledError(
                "[trace] otel = true needs the OpenTelemetry SDK: pip install opentelemetry-sdk"
            ) from exc
        self._otel = otel
        self._provider = provider
        self._tracer = (provider or otel.get_tracer_provider()).get_tracer("hookchat")

    def export(self, trace: Trace) -> None:
        """Send `trace` as spans (the SDK's span processor does the exporting)."""
        try:
            self._export(trace)
        except Exception:
            _log.exception("could not export trace %s to OpenTelemetry", trace.id)

    def _export(self, trace: Trace) -> None:
        data = trace.to_dict()
        # perf_counter readings become wall-clock nanoseconds by anchoring the trace's start to its wall time.
        base = int(trace.started_at.timestamp() * 1e9)
        end = base + int(data["duration_ms"] * 1e6)
        otel = self._otel
        root = self._tracer.start_span(
            f"hookchat.{trace.kind}",
            start_time=base,
            attributes={
                "hookchat.trace_id": trace.id,
                "hookchat.name": trace.name,
                "hookchat.sid": trace.sid or "",
                "hookchat.outcome": trace.outcome,
            },
        )
        ctx = otel.set_span_in_context(root)

        def at(ms: float) -> int:
            return base + int(ms * 1e6)

        for item in data["timeline"]:
            kind = item["type"]
            name = f"hookchat.{kind}" + (
                f" {item['event']}" if kind == "event" else f" {item['name']}" if "name" in item else ""
            )
            attrs = {
                f"hookchat.{k}": v
                for k, v in item.items()
                if isinstance(v, (str, int, float, bool)) and k not in ("start_ms", "duration_ms")
            }
            span = self._tracer.start_span(name, context=ctx, start_time=at(item["start_ms"]), attributes=attrs)
            if kind == "event":
                inner = otel.set_span_in_context(span)
                for hook in item["hooks"]:
                    hook_span = self._tracer.start_span(
                        f"hook {hook['plugin_id']}.{hook['function']}",
                        context=inner,
                        start_time=at(hook["start_ms"]),
                        attributes={
                            "hookchat.plugin_id": hook["plugin_id"],
                            "hookchat.outcome": hook["outcome"],
                            "hookchat.priority": hook["priority"],
                            "code.filepath": hook["file"],
                            "code.lineno": hook["line"],
                        },
                    )
                    if hook["error"]:
                        hook_span.set_status(otel.Status(otel.StatusCode.ERROR, hook["error"]))
                    hook_span.end(end_time=at(hook["start_ms"] + hook["duration_ms"]))
            if item.get("error") or item.get("is_error"):
                span.set_status(otel.Status(otel.StatusCode.ERROR, str(item.get("error") or "tool error")))
            span.end(end_time=at(item["start_ms"] + item["duration_ms"]))
        if trace.outcome == "error":
            root.set_status(otel.Status(otel.StatusCode.ERROR, trace.error or "error"))
        root.end(end_time=max(end, base))

    def close(self) -> None:
        """Flush the provider this sink was given (a global one is the operator's to shut down)."""
        if self._provider is not None and hasattr(self._provider, "force_flush"):
            self._provider.force_flush()
