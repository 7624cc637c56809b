"""The JSON-lines writer's lines, byte for byte: varied traces in the plain data the event loop hands over
(`Trace.compact`) rendered by `FileWriter`, against lines the writer wrote before its rendering was rewritten
(`writer_lines.jsonl`): a reader of older files and newer ones sees the same text. (One line differs from what the
writer wrote then, on purpose: a batch holding a value `marshal` cannot take used to write its model calls' sections
as a flat list of strings; they are numbered now, as in every other line.)"""

from __future__ import annotations

from pathlib import Path

from core.chat.message_utils import MessageStrategy
from core.trace._spans import _chain, _request, _strategy
from core.trace._writer import HEADER, FileWriter, pack, unpack

EXPECTED = Path(__file__).parent / "writer_lines.jsonl"

T0 = 1_000_000_000  # a trace's first `clock()` reading (nanoseconds)
HOOKS = [
    ["im_message", "greeter", "on_message", "plugins/greeter.py", 12, 0, 10.0],
    ["im_message", "guard", "check", "plugins/guard.py", 40, 5, 10.0],
    ["llm_request", "persona", "prompt", "plugins/persona.py", 7, 0, 30.0],
    ["llm_request", "tools", "add_tools", "plugins/tools.py", 9, 1, 30.0],
    ["after_xml_parse", "filter", "clean", "plugins/filter.py", 3, 0, 10.0],
]
CHAINS = [[1, 2], [3, 4], [5]]
SECTIONS = ("persona", "core", "You are kind.", "time", "core", "It is noon.", "empty", "core", "")


def _readings(start_us: int, *steps_ns: int) -> list[int]:
    at = [T0 + start_us * 1000]
    for step in steps_ns:
        at.append(at[-1] + step)
    return at


def _request_state(tools: tuple[str, ...], tags: tuple[str, ...], sections: tuple[str, ...] = SECTIONS) -> tuple:
    return (sections, tools, tags, (("hello", "\n", True), ("there", "", False)), 1, 1)


def _frames() -> list:
    before = _request_state(("search",), ("msg", "embed"))
    edited = _request_state(("search", "weather"), ("msg",), (*SECTIONS[:3], "time", "core", "It is one."))
    strategy = [(MessageStrategy.DISCARD, False), (MessageStrategy.BUFFER, True), (MessageStrategy.BUFFER, True)]
    extras = [
        (_strategy, strategy, None, False),
        (_request, [before, edited, edited], None, False),
        (None, None, {1: ("raised", "ValueError: bad ünïcode", "Traceback (most recent call last):\n  boom\n")}, False),
        (None, None, {0: ("timed_out", "TimeoutError: ", None)}, True),
        (None, None, None, True),
        (_chain, [["a", "b"], ["a", "b"], ["a", "c"]], None, False),
    ]
    running = {
        "type": "event",
        "event": "llm_request",
        "start_ms": 0.2,
        "duration_ms": 5.5,
        "chain": 2,
        "at": [200, 300, 5700],
        "stopped_by": None,
        "notes": {"1": {"outcome": "cancelled"}},
    }
    message_texts = ("m1", "message", "hi 👋", "test:dm:u1", 1_700_000_000_000_000, "buffer", None, (), (), 0, [])
    message_numbers = (T0 - 2_000_000, T0 - 1_000_000, [(1, _readings(-1999, 1500, 2501), 0)], [])
    items = [
        {
            "provider": "echo",
            "model": "echo-1",
            "streamed": False,
            "system_prompt": SECTIONS,
            "tools": ["search"],
            "tool_choice": "auto",
            "history_messages": 3,
            "prompt_tokens": 12,
            "completion_tokens": 7,
            "output": "<msg><text>héllo \ud800 there</text></msg>",
            "tool_calls": [{"name": "search", "arguments": {"q": "天气"}}],
            "finish_reason": "stop",
            "error": None,
            "type": "model",
            "start_ms": 0.05,
            "duration_ms": 1.25,
        },
        {
            "name": "search",
            "plugin_id": "tools",
            "arguments": {"q": "x", "n": [1, 2.5, True]},
            "result": "found",
            "is_error": False,
            "type": "tool",
            "start_ms": 1.5,
            "duration_ms": 0.0,
        },
        {
            "name": "text",
            "plugin_id": None,
            "value": "Hi",
            "attrs": {"a": "1"},
            "elements": ["Hi"],
            "error": None,
            "type": "tag",
            "start_ms": 2.0,
            "duration_ms": 0.003,
        },
        {
            "text": "Hi",
            "elements": ["Text"],
            "ok": False,
            "message_id": "",
            "error": "down",
            "type": "send",
            "start_ms": 2.5,
            "duration_ms": 0.1,
        },
        {"messages": 2, "type": "history", "start_ms": 10.0, "duration_ms": 0.0},
    ]
    logs = [{"t_ms": 0.4, "level": "WARNING", "logger": "plugin.guard", "message": 'careful "quoted"'}]
    texts = (
        "t1",
        "turn",
        "hi 👋",
        "test:dm:u1",
        1_700_000_000_002_500,
        "completed",
        None,
        items,
        logs,
        2,
        [message_texts],
    )
    records = [
        (1, _readings(0, 1500, 2501)),
        (2, _readings(3, 1000, 999_600), 1),
        (2, _readings(1100, 400, 400), 2),
        (1, _readings(1200, 400, 400), 3),
        (1, _readings(1300, 400), 4),
        (3, _readings(1400, 400), 5),
        running,
        (3, _readings(1800, 123_456_789)),
    ]
    numbers = (T0, T0 + 130_500_700, records, [message_numbers])
    failed = ("t2", "event", "", None, 1_700_000_000_900_000, "failed", "RuntimeError: no", (), (), 0, [])
    later = (T0 + 10**9, T0 + 10**9 + 1000, [(2, _readings(10**6, 500, 500))], [])
    # A value `marshal` cannot take is sent as JSON gives it, the rest of its batch as it is (a model call's sections
    # still a tuple, so numbered as in every other trace).
    odd = {**items[1], "arguments": {"when": Path("/tmp/odd")}}
    odd_texts = ("t3", "turn", "odd", None, 1_700_000_001_000_000, "completed", None, [items[0], odd], (), 0, [])
    return [
        [((0, HOOKS, 0, CHAINS), texts, numbers, [*extras, None]), (None, failed, later, [])],
        [(None, texts, numbers, [*extras, None])],  # every section seen before is a number
        [(None, odd_texts, later, [])],
    ]


def _written(path: Path, batches: list) -> bytes:
    writer = FileWriter(path, 1 << 30)
    for frames in batches:
        header, *parts = pack(frames)  # as the writer process reads them: the header, then the parts it sizes
        assert list(HEADER.unpack(header)) == [len(part) for part in parts]
        writer.write(unpack(*parts))
    writer.close()
    return path.read_bytes()


def test_the_writer_writes_each_kind_of_trace_as_it_always_has(tmp_path):
    assert _written(tmp_path / "trace.jsonl", _frames()) == EXPECTED.read_bytes()
