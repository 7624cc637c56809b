"""Traces: what every event of a turn went through, hook by hook, and what the model, the tools, the tags, the
adapter and the history store did, under one trace id that every log line of the turn carries.

    tracer = Tracer(ring_size=200)          # the app builds one from `[trace]`; the engine asks `tracer.enabled`
    trace = tracer.recent(1)[0]              # the newest finished trace
    print(render_trace(trace.to_dict()))

See docs/tracing.md.
"""

from core.trace._render import render_trace
from core.trace._sinks import JsonLinesSink, OtelNotInstalledError, OtelSink, TraceRing, read_json_lines
from core.trace._spans import DispatchSpan, HookCall, HookLike, RequestLike, ResponseLike, Trace, clock
from core.trace._tracer import Tracer, current_trace, current_trace_id, default_file, install_log_context

__all__ = [
    "DispatchSpan",
    "HookCall",
    "HookLike",
    "JsonLinesSink",
    "OtelNotInstalledError",
    "OtelSink",
    "RequestLike",
    "ResponseLike",
    "Trace",
    "TraceRing",
    "Tracer",
    "clock",
    "current_trace",
    "current_trace_id",
    "default_file",
    "install_log_context",
    "read_json_lines",
    "render_trace",
]
