"""The trace of one turn: each hook with its plugin and outcome, what hooks changed, the model call, the tool
call, the tag, the sends and the history write, one trace id in the turn's log lines; and tracing on or off gives
the same replies."""

import asyncio
import json
import logging

import pytest

from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on, register
from core.prompt_manager import Prompt
from core.testing import ChatHarness, ScriptedProvider, ToolCall
from core.trace import read_json_lines, render_trace
from core.trace._sinks import JsonLinesSink, TraceRing
from core.trace._spans import Trace

pytestmark = pytest.mark.anyio


class Probe(BasePlugin):
    @on.im_message(priority=Priority.HIGH)
    async def now(self, event, *_):
        event.trigger(force=True)

    @on.llm_request()
    async def add_context(self, event, req, tag_set, *_):
        req.system_prompt.append(Prompt("The user likes short answers.", "probe_context", "probe"))

    @on.llm_request(priority=Priority.LOW)
    async def broken(self, event, req, tag_set, *_):
        raise RuntimeError("boom in broken")

    @on.step_result(deadline=0.05)
    async def slow(self, event, resp, *_):
        if resp.tool_calls:
            await asyncio.sleep(5)

    @register.tool(
        "lookup", "Look a word up", {"type": "object", "properties": {"word": {"type": "string"}}, "required": ["word"]}
    )
    async def lookup(self, event, *_, word: str):
        return f"{word} means hello"

    @register.tag("shout", "Say it loudly")
    async def shout(self, value: str, **kwargs):
        return [Text(value.upper())]


class Censor(BasePlugin):
    @on.after_xml_parse()
    async def no_secrets(self, event, chain, *_):
        if "secret" in chain.plain_text:
            event.stop()


def script() -> list:
    return [
        [ToolCall("lookup", {"word": "hi"}, id="call_1")],
        "<msg>hello <shout>world</shout></msg><msg>the secret is 42</msg>",
    ]


def calls_of(trace, function):
    return [c for c in trace.hook_calls() if c.function == function]


async def test_a_turn_records_every_hook_with_its_plugin_and_outcome(caplog):
    caplog.set_level(logging.INFO, logger="hookchat")
    async with ChatHarness(plugins=[Probe, Censor], provider=ScriptedProvider(script())) as bot:
        chains = await bot.send("what does hi mean?")
        trace = bot.app.tracer.recent(1, kind="turn")[0]
    assert [c.plain_text for c in chains] == ["hello WORLD"], "the stopped second message is not sent"
    assert trace.outcome == "stopped" and trace.sid == "test:dm:user"

    [message] = trace.messages
    [now] = [c for c in message.hook_calls() if c.function == "now"]
    assert (now.plugin_id, now.event, now.priority) == ("probe", "im_message", Priority.HIGH)
    assert now.strategy == {"strategy": "trigger", "force": True}
    assert now.file.endswith("test_turn_trace.py") and now.line > 0

    added = calls_of(trace, "add_context")
    assert added[0].outcome == "returned"
    assert any("prompt section 'probe_context' added (source 'probe')" in c for c in added[0].changes)

    broken = calls_of(trace, "broken")[0]
    assert (broken.plugin_id, broken.outcome) == ("probe", "raised")
    assert "RuntimeError: boom in broken" in broken.error and "boom in broken" in broken.traceback

    slow = calls_of(trace, "slow")
    assert [c.outcome for c in slow] == ["timed_out"], "only the step with tool calls sleeps; the stop ends the rest"

    censor = calls_of(trace, "no_secrets")
    assert [(c.plugin_id, c.outcome) for c in censor] == [("censor", "returned"), ("censor", "stopped")]
    assert not calls_of(trace, "final_result"), "a stopped turn runs no final_result"

    data = trace.to_dict()
    items = data["timeline"]
    [tool] = [i for i in items if i["type"] == "tool"]
    assert (tool["name"], tool["plugin_id"], tool["arguments"], tool["result"], tool["is_error"]) == (
        "lookup",
        "probe",
        {"word": "hi"},
        "hi means hello",
        False,
    )
    [tag] = [i for i in items if i["type"] == "tag"]
    assert (tag["name"], tag["plugin_id"], tag["value"], tag["elements"]) == ("shout", "probe", "world", ["WORLD"])
    models = [i for i in items if i["type"] == "model"]
    assert [m["provider"] for m in models] == ["scripted", "scripted"]
    assert models[0]["tools"] == ["lookup"] and models[0]["tool_calls"] == [
        {"name": "lookup", "arguments": {"word": "hi"}}
    ]
    sections = {(p["name"], p["source"]) for p in models[0]["system_prompt"]}
    assert ("probe_context", "probe") in sections and ("role", "core") in sections
    assert [i["text"] for i in items if i["type"] == "send"] == ["hello WORLD"]
    assert [i["messages"] for i in items if i["type"] == "history"] == [4]
    stages = [i["event"] for i in items if i["type"] == "event"]
    assert stages[0] == "llm_request" and stages.count("after_xml_parse") == 2, "events with hooks, in order"

    failure_logs = [r for r in caplog.records if "boom in broken" in r.getMessage()]
    assert failure_logs and all(r.trace_id == trace.id for r in failure_logs), "the turn's log lines carry its id"
    assert any("boom in broken" in line["message"] for line in data["logs"])

    text = render_trace(data)
    assert (
        "probe.broken" in text and "raised" in text and "timed_out" in text and "stopped by censor.no_secrets" in text
    )


class Editor(BasePlugin):
    @on.llm_request(priority=Priority.HIGH)
    async def edit(self, event, req, tag_set, *_):
        req.system_prompt[0].content = "You answer in rhymes."
        req.system_prompt.pop()
        tag_set.unregister("shout")

    @on.llm_request()
    async def nothing(self, event, req, tag_set, *_):
        pass


async def test_a_hook_that_edits_removes_and_drops_shows_each_change_and_the_next_none():
    async with ChatHarness(plugins=[Probe, Editor], provider=ScriptedProvider(["<msg>ok</msg>"])) as bot:
        await bot.send("hi")
        trace = bot.app.tracer.recent(1, kind="turn")[0]
    [edit] = calls_of(trace, "edit")
    first = edit.changes[0]
    assert first.startswith("prompt section ") and first.endswith("edited: 'You answer in rhymes.'")
    assert "1 prompt section(s) removed" in edit.changes
    assert "tag <shout> removed" in edit.changes
    assert calls_of(trace, "nothing")[0].changes == [], "a hook that changes nothing shows no change"


async def test_tracing_on_and_off_give_the_same_replies(tmp_path):
    replies = {}
    for enabled in (True, False):
        async with ChatHarness(
            plugins=[Probe, Censor], provider=ScriptedProvider(script()), config={"trace": {"enabled": enabled}}
        ) as bot:
            replies[enabled] = [c.plain_text for c in await bot.send("what does hi mean?")]
            kept = bot.app.tracer.recent()
        assert bool(kept) is enabled, "tracing off records nothing"
    assert replies[True] == replies[False] == ["hello WORLD"]


async def test_finished_traces_are_written_as_json_lines(tmp_path):
    provider = ScriptedProvider(["<msg>one</msg>", "<msg>two</msg>"])
    async with ChatHarness(provider=provider, config={"data": {"dir": str(tmp_path)}}) as bot:
        await bot.send("first")
        await bot.send("second")
        ids = [t.id for t in reversed(bot.app.tracer.recent(kind="turn"))]
    written = [t for t in read_json_lines(tmp_path / "traces.jsonl") if t["kind"] == "turn"]
    assert [t["id"] for t in written] == ids
    assert [t["outcome"] for t in written] == ["completed", "completed"]


async def test_the_file_gives_back_each_trace_as_the_ring_shows_it(tmp_path):
    # The file holds hooks as rows of a table (written compact, off the event loop); reading expands them again:
    # every hook with its outcome, error, strategy and changes, the stop, the model call, tool call, tag and sends.
    provider = ScriptedProvider(script())
    config = {"data": {"dir": str(tmp_path)}}
    async with ChatHarness(plugins=[Probe, Censor], provider=provider, config=config) as bot:
        await bot.send("what does hi mean?")
        shown = [json.loads(json.dumps(t.to_dict(), default=str)) for t in reversed(bot.app.tracer.recent())]
    written = read_json_lines(tmp_path / "traces.jsonl")
    # The file keeps microseconds since the trace started; a hook's duration is the difference of two of them.
    assert _without_durations(written) == _without_durations(shown)
    assert _durations(written) == pytest.approx(_durations(shown), abs=0.0015)
    hooks = [h for item in written[-1]["timeline"] if item["type"] == "event" for h in item["hooks"]]
    assert {h["outcome"] for h in hooks} >= {"returned", "raised", "timed_out", "stopped"}
    assert any("probe_context" in change for h in hooks for change in h["changes"])


def _hooks(traces: list[dict]) -> list[dict]:
    items = [item for t in traces for m in [*t["messages"], t] for item in m["timeline"] if item["type"] == "event"]
    return [h for item in items for h in item["hooks"]]


def _durations(traces: list[dict]) -> list[float]:
    return [h["duration_ms"] for h in _hooks(traces)]


def _without_durations(traces: list[dict]) -> list[dict]:
    copied = json.loads(json.dumps(traces))
    for hook in _hooks(copied):
        del hook["duration_ms"]
    return copied


def test_each_rotated_file_describes_its_own_hooks(tmp_path):
    class Hook:
        fn = staticmethod(test_each_rotated_file_describes_its_own_hooks)
        plugin_id, hook_name, event, priority, deadline = "demo", "hook", "im_message", 0, 10.0

    class Recorded(_Recorded):
        def records(self, table) -> list:
            return [(table.chain((Hook,)), [100_000, 300_000])]  # nanoseconds since the trace started

    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1024)
    for i in range(20):
        sink.write(Recorded(f"t{i}", "x" * 100))
    sink.close()
    assert path.with_name("traces.jsonl.1").is_file()
    for file in (path, path.with_name("traces.jsonl.1")):
        [hook] = [h for t in read_json_lines(file) for item in t["timeline"] for h in item["hooks"]][-1:]
        assert (hook["plugin_id"], hook["function"], hook["duration_ms"]) == ("demo", "hook", 0.2)


class _Recorded:
    """Stands in for a finished trace: what the file sink reads of one (`Trace.compact`)."""

    def __init__(self, trace_id: str, text: str) -> None:
        self.id = trace_id
        self.text = text

    def records(self, table) -> list:
        return []

    def compact(self, table, extras) -> tuple:
        started_at = 1_796_428_800_000_000  # 2026-12-05, in microseconds since 1970
        texts = (self.id, "turn", self.text, None, started_at, "completed", None, [], [], 0, [])
        return texts, (0, 1_000_000, self.records(table), [])  # started and ended (ns), dispatches, messages


def test_a_lone_surrogate_in_a_trace_is_written_as_a_replacement_and_the_writer_goes_on(tmp_path):
    sink = JsonLinesSink(tmp_path / "traces.jsonl", max_bytes=1 << 20)
    sink.write(_Recorded("t1", "half an emoji \ud83d"))
    sink.write(_Recorded("t2", "next"))
    sink.close()
    assert [(t["id"], t["name"]) for t in read_json_lines(tmp_path / "traces.jsonl")] == [
        ("t1", "half an emoji \ufffd"),
        ("t2", "next"),
    ]


def test_the_trace_file_is_rotated_by_bytes_so_cjk_text_stays_within_max_file_bytes(tmp_path):
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=4096)
    for i in range(60):  # one batch or several, whatever the writer thread makes of them
        sink.write(_Recorded(f"t{i}", "你好世界，今天天气很好。" * 10))  # 120 characters, 360 bytes
    sink.close()
    rotated = path.with_name("traces.jsonl.1")
    assert rotated.stat().st_size <= 4096 and path.stat().st_size <= 4096, "max_file_bytes counts bytes"
    kept = read_json_lines(path)
    assert kept[-1]["id"] == "t59" and all(t["name"].startswith("你好世界") for t in kept)


async def test_the_ring_keeps_only_the_newest_traces():
    provider = ScriptedProvider([f"<msg>{i}</msg>" for i in range(5)])
    async with ChatHarness(provider=provider, config={"trace": {"ring_size": 3, "file": ""}}) as bot:
        for i in range(5):
            await bot.send(f"message {i}")
        kept = bot.app.tracer.recent(10)
    assert len(kept) == 3
    assert kept[0].kind == "turn" and kept[0].name == "message 4"


def test_the_ring_counts_a_turn_once_per_message_it_answered():
    # A flood's turns answer hundreds of messages each: counted as one trace each, 200 of them would hold tens of
    # thousands of message traces.
    def turn(name: str, messages: int) -> Trace:
        trace = Trace(None, name, "turn", name)
        for i in range(messages):
            trace.adopt(Trace(None, f"{name}.m{i}", "message", f"message {i}"))
        return trace

    ring = TraceRing(10)
    for i in range(4):
        ring.add(turn(f"small{i}", 1))
    ring.add(turn("flood", 8))
    assert [t.id for t in ring.recent(10)] == ["flood", "small3", "small2"], "8 + 1 + 1 messages: the ring is full"
    assert ring.get("flood.m7").id == "flood" and ring.get("small1.m0") is None, "what left, left with its messages"
    ring.add(turn("bigger", 30))
    assert [t.id for t in ring.recent(10)] == ["bigger"], "the newest is kept whatever its size"


async def test_a_discarded_message_gets_a_trace_of_its_own():
    async with ChatHarness(builtins=()) as bot:  # without the chat plugin every message is discarded
        assert await bot.send("anyone?") == []
        [trace] = bot.app.tracer.recent(kind="message")
    assert trace.outcome == "discarded" and trace.name == "anyone?"


class Clockwork(BasePlugin):
    """A section that is new at every turn, beside the ones that repeat."""

    turn = 0

    @on.llm_request()
    async def stamp(self, event, req, tag_set, *_):
        Clockwork.turn += 1
        req.system_prompt.append(Prompt(f"This is turn {Clockwork.turn}.", "stamp", "clockwork"))


async def test_the_file_describes_a_repeated_prompt_section_once_and_writes_a_new_one_in_full(tmp_path):
    Clockwork.turn = 0
    provider = ScriptedProvider(["<msg>one</msg>", "<msg>two</msg>", "<msg>three</msg>"])
    async with ChatHarness(plugins=[Clockwork], provider=provider, config={"data": {"dir": str(tmp_path)}}) as bot:
        for text in ("first", "second", "third"):
            await bot.send(text)
        shown = [json.loads(json.dumps(t.to_dict(), default=str)) for t in reversed(bot.app.tracer.recent())]
    lines = [json.loads(line) for line in (tmp_path / "traces.jsonl").read_text().splitlines()]
    described = [n for line in lines if "id" not in line for n in line.get("sections", {})]
    assert described and len(described) == len(set(described)), "each section is described once in a file"
    prompts = [i["system_prompt"] for line in lines for i in line.get("timeline", ()) if i["type"] == "model"]
    assert all(isinstance(p, dict) for p in prompts[0]), "the first turn's sections are written in full"
    assert any(isinstance(p, int) for p in prompts[-1]), "later turns give the repeated ones by number"
    stamps = [p for prompt in prompts for p in prompt if isinstance(p, dict) and p["name"] == "stamp"]
    assert [p["content"] for p in stamps] == ["This is turn 1.", "This is turn 2.", "This is turn 3."]
    written = read_json_lines(tmp_path / "traces.jsonl")
    assert [i["system_prompt"] for t in written for i in t["timeline"] if i["type"] == "model"] == [
        i["system_prompt"] for t in shown for i in t["timeline"] if i["type"] == "model"
    ]


async def test_a_turn_keeps_its_message_trace_while_thousands_of_sessions_wait():
    # Every session's message waits for its turn at once: each turn still holds the trace of the message it answered
    # (its `im_message` hooks), not a separate trace of a message dropped for waiting too long.
    sessions = 1_500
    provider = ScriptedProvider(["<msg>hi</msg>"] * sessions)
    async with ChatHarness(provider=provider, config={"trace": {"ring_size": 2 * sessions, "file": ""}}) as bot:
        app = bot.app
        await asyncio.gather(*(app.respond(bot.message("hello", user_id=f"user{i}")) for i in range(sessions)))
        turns = app.tracer.recent(2 * sessions, kind="turn")
        dropped = app.tracer.recent(2 * sessions, kind="message")
    assert len(turns) == sessions and dropped == []
    assert all(len(turn.messages) == 1 for turn in turns)
