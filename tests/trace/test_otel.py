"""Traces exported as OpenTelemetry spans, when the SDK is installed and a tracer provider is given."""

import pytest

from core.testing import ChatHarness, ScriptedProvider
from core.trace import OtelSink

pytest.importorskip("opentelemetry.sdk")
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

pytestmark = pytest.mark.anyio


async def test_a_turn_becomes_a_root_span_with_a_child_per_stage_and_hook():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    async with ChatHarness(provider=ScriptedProvider(["<msg>hi</msg>"])) as bot:
        bot.app.tracer.otel = OtelSink(provider)
        await bot.send("hello")
        turn = bot.app.tracer.recent(1, kind="turn")[0]
    spans = {s.name: s for s in exporter.get_finished_spans()}
    root = spans["hookchat.turn"]
    assert root.attributes["hookchat.trace_id"] == turn.id
    assert root.attributes["hookchat.outcome"] == "completed"
    assert "hookchat.model" in spans
    hook = spans["hook builtin_tags.offer_supported_tags"]
    assert hook.parent.span_id == spans["hookchat.event llm_request"].context.span_id
    assert spans["hookchat.event llm_request"].parent.span_id == root.context.span_id
    assert root.start_time <= hook.start_time <= hook.end_time <= root.end_time
