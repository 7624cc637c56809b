"""Where finished traces go: the bounded in-memory ring, a JSON-lines file written by a thread of its own (no file
I/O on the event loop), and OpenTelemetry spans when the SDK is installed and asked for."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from core.trace._spans import HookTable, Trace, expand_rows
from core.utils.text import valid_text

__all__ = ["TraceRing", "JsonLinesSink", "OtelSink", "read_json_lines", "OtelNotInstalledError"]

_log = logging.getLogger("hookchat.trace")


class TraceRing:
    """The last `size` finished traces, by id (messages adopted by a turn are found by their own id too)."""

    def __init__(self, size: int) -> None:
        self.size = max(1, size)
        self._traces: deque[Trace] = deque()
        self._by_id: dict[str, Trace] = {}

    def add(self, trace: Trace) -> None:
        """Keep `trace`; the oldest one goes when the ring is full."""
        self._traces.append(trace)
        self._by_id[trace.id] = trace
        for child in trace.messages:
            self._by_id[child.id] = trace
        while len(self._traces) > self.size:
            old = self._traces.popleft()
            self._by_id.pop(old.id, None)
            for child in old.messages:
                self._by_id.pop(child.id, None)

    def get(self, trace_id: str) -> Trace | None:
        """The trace with this id (for a message's id: the turn that holds it), or None."""
        return self._by_id.get(trace_id)

    def recent(self, limit: int = 20, kind: str | None = None) -> list[Trace]:
        """The newest traces first, at most `limit`, only of `kind` when given."""
        out: list[Trace] = []
        for trace in reversed(self._traces):
            if kind is None or trace.kind == kind:
                out.append(trace)
                if len(out) >= limit:
                    break
        return out

    def __len__(self) -> int:
        return len(self._traces)


class JsonLinesSink:
    """Appends each finished trace as one JSON line to `path`; at `max_bytes` the file moves to `<path>.1`.

    A daemon thread owned by the sink does the serialising and writing, a batch at a time, with the file kept
    open; `close()` drains it and joins it. Woken by a finished trace, the thread first waits `batch_delay`
    seconds, so it takes the event loop's thread's place (the GIL) once for the traces of that while rather than
    once per trace: a line reaches the file at most that much later. At most `max_queued` traces wait: past that
    (a disk slower than the bot) the newest are dropped and counted, with one warning, rather than memory growing
    without bound.

    A line holds `Trace.compact()`: each dispatch as the number of its chain and one reading per hook (a row
    `[chain, *at]` when its hooks all simply returned), and a model call's system prompt sections seen before as
    their numbers; the chains, hooks and sections described by table
    lines (`{"hooks": {"1": [event, plugin_id, function, file, line, priority, deadline]}, "chains": {"1": [1, 2]},
    "sections": {"1": [name, source, content]}}`) before the first trace that uses them, in each file;
    `read_json_lines` gives the traces back as `Trace.to_dict()` has them. Writing every hook's fourteen fields as a dict cost more
    than the turn itself.
    """

    def __init__(self, path: Path, max_bytes: int, max_queued: int = 10_000, batch_delay: float = 0.05) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.max_queued = max_queued
        self.batch_delay = batch_delay
        self.dropped = 0
        # A deque and an event rather than a `queue.Queue`: appending takes no lock, and the event is set only when
        # the thread may be waiting for it (once per batch), not at every trace.
        self._queue: deque[Trace | None] = deque()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._closed = False
        self._table = HookTable()  # the writer thread's alone
        self._described = (0, 0, 0)  # the hooks, chains and sections of `_table` the current file has described

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
        self._queue.append(trace)
        if not self._wake.is_set():
            self._wake.set()

    def _take(self) -> list[Trace | None]:
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
        file = None
        try:
            while True:
                batch = self._take()
                stop = None in batch
                lines = [self._line(t) for t in batch if t is not None]
                try:
                    file = self._append(file, [line for line in lines if line])
                except Exception:
                    _log.exception("could not write %d trace(s) to %s", len(lines), self.path)
                    file = None
                if stop:
                    return
        finally:
            if file is not None:
                file.close()

    def _line(self, trace: Trace) -> str:
        try:
            data = trace.compact(self._table)
            return valid_text(json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))) + "\n"
        except Exception:
            _log.exception("could not serialise trace %s", trace.id)
            return ""

    def _hooks_line(self) -> bytes:
        """The table line describing the hooks, chains and prompt sections the current file has not described yet
        (b"" if none)."""
        table = self._table
        hooks_done, chains_done, sections_done = self._described
        described = (len(table.hooks), len(table.chains), len(table.sections))
        if described == self._described:
            return b""
        data = {
            "hooks": {str(n): table.hooks[n - 1] for n in range(hooks_done + 1, len(table.hooks) + 1)},
            "chains": {str(n): table.chains[n - 1] for n in range(chains_done + 1, len(table.chains) + 1)},
            "sections": {str(n): table.sections[n - 1] for n in range(sections_done + 1, len(table.sections) + 1)},
        }
        self._described = described
        line = json.dumps(data, ensure_ascii=False, default=str, separators=(",", ":"))
        return (valid_text(line) + "\n").encode("utf-8", errors="replace")

    def _append(self, file: Any, lines: list[str]) -> Any:
        """Write `lines`, moving the file to `<path>.1` before a line that would take it past `max_bytes` (counted
        in bytes: a line of CJK text is three times its length); a single larger line gets a file of its own. Each
        file starts its hook table again, so either can be read alone."""
        if not lines:
            return file
        if file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            file = self.path.open("ab")
            # A file opened anew (an earlier run's, or after a failed write) gets the whole table again: a reader
            # takes the newest description of each number.
            self._described = (0, 0, 0)
        pending: list[bytes] = []
        size = file.tell()
        for line in lines:
            data = line.encode("utf-8", errors="replace")  # a lone surrogate left in a trace: "?"
            table = self._hooks_line()
            if size + len(table) + len(data) > self.max_bytes and size > 0:
                file.write(b"".join(pending))
                pending.clear()
                file.close()
                self.path.replace(self.path.with_name(self.path.name + ".1"))
                file = self.path.open("ab")
                size = 0
                self._described = (0, 0, 0)
                table = self._hooks_line()
            pending.append(table + data)
            size += len(table) + len(data)
        file.write(b"".join(pending))
        file.flush()
        return file

    def close(self) -> None:
        """Write what is queued, then stop the thread (blocking: call it off the event loop)."""
        self._closed = True
        thread, self._thread = self._thread, None
        if thread is not None:
            self._queue.append(None)
            self._wake.set()
            thread.join()


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
