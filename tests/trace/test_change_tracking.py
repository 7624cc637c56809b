"""What an `llm_request` hook changed, as the trace shows it, now that the tools and tags are compared by their sets'
`version` rather than their names: each way of changing the request still shows its change, in the ring and in the
JSON-lines file, and a hook that changes nothing (or puts back what it took) shows none."""

from types import SimpleNamespace

import pytest

from core.chat import MessageStrategy
from core.plugin import BasePlugin, on
from core.prompt_manager import Prompt
from core.tag import BaseTag, TagSet
from core.testing import ChatHarness, ScriptedProvider
from core.trace import read_json_lines
from core.utils.tool_utils import BaseTool, ToolSet

pytestmark = pytest.mark.anyio


class Weather(BaseTool):
    name = "weather"
    description = "The weather"

    async def execute(self, *args, **params):
        return "sunny"


class Clock(BaseTool):
    name = "clock"
    description = "The time"

    async def execute(self, *args, **params):
        return "noon"


class Wave(BaseTag):
    name = "wave"
    description = "Wave at the user"

    async def handle(self, value, **attrs):
        return []


#: (hook name, what it does to the request, the change lines the trace must show), in the order the hooks run.
EDITS = [
    ("adds_tool", lambda req, tags: req.tool_set.add(Weather()), ["tool 'weather' added"]),
    ("idle_1", lambda req, tags: None, []),
    ("adds_second_tool", lambda req, tags: req.tool_set.add(Clock()), ["tool 'clock' added"]),
    ("removes_tool", lambda req, tags: req.tool_set.remove("weather"), ["tool 'weather' removed"]),
    ("clears_tools", lambda req, tags: req.tool_set.clear(), ["tool 'clock' removed"]),
    ("replaces_tool_set", lambda req, tags: setattr(req, "tool_set", ToolSet([Weather()])), ["tool 'weather' added"]),
    ("puts_back", lambda req, tags: (req.tool_set.remove("weather"), req.tool_set.add(Weather())), []),
    ("registers_tag", lambda req, tags: tags.register(Wave()), ["tag <wave> added"]),
    ("idle_2", lambda req, tags: None, []),
    ("unregisters_tag", lambda req, tags: tags.unregister("wave"), ["tag <wave> removed"]),
    (
        "appends_section",
        lambda req, tags: req.system_prompt.append(Prompt("Be brief.", "extra", "edits")),
        ["prompt section 'extra' added (source 'edits'): 'Be brief.'"],
    ),
    ("edits_section", lambda req, tags: setattr(req.get_prompt("extra"), "content", "Be briefer."), None),
    ("removes_section", lambda req, tags: req.system_prompt.pop(), ["1 prompt section(s) removed"]),
    ("edits_user_prompt", lambda req, tags: setattr(req, "user_prompt", "hello again"), None),
    (
        "appends_to_user_prompt",  # in place: the same list, one part more
        lambda req, tags: req.user_prompt.append(Prompt("PS", end="")),
        ["user prompt edited: 'hello again\\nPS'"],
    ),
    (
        "edits_default_section_in_place",  # a section every request starts with, through the object a hook holds
        lambda req, tags: setattr(req.get_prompt("memory"), "content", "Likes tea."),
        ["prompt section 'memory' edited: 'Likes tea.'"],
    ),
    (
        "edits_user_part_in_place",  # the same list and the same part, its content replaced
        lambda req, tags: setattr(req.user_prompt[-1], "content", "P.S."),
        ["user prompt edited: 'hello again\\nP.S.'"],
    ),
    (
        "renames_section_in_place",
        lambda req, tags: setattr(req.get_prompt("persona"), "name", "character"),
        ["prompt section 'character' added (source 'core'): ''"],
    ),
    (
        "replaces_section_with_an_equal_copy",  # another object, the same fields: nothing to show
        lambda req, tags: req.system_prompt.__setitem__(1, Prompt("", "character", "core")),
        [],
    ),
    (
        "edits_the_copy_in_place",  # an object the request did not hold when the last snapshot was taken
        lambda req, tags: setattr(req.get_prompt("character"), "content", "Cheerful."),
        ["prompt section 'character' edited: 'Cheerful.'"],
    ),
    (
        "keeps_user_part_out_of_history",  # the text stays, the part's `persist` changes
        lambda req, tags: setattr(req.user_prompt[-1], "persist", False),
        ["user prompt edited: 'hello again\\nP.S.'"],
    ),
    (
        "appends_own_section",  # not a `Prompt`: its edits are not counted, so it is compared at each hook
        lambda req, tags: req.system_prompt.append(SimpleNamespace(name="notes", source="edits", content="a")),
        ["prompt section 'notes' added (source 'edits'): 'a'"],
    ),
    (
        "edits_own_section_in_place",
        lambda req, tags: setattr(req.system_prompt[-1], "content", "b"),
        ["prompt section 'notes' edited: 'b'"],
    ),
    ("removes_own_section", lambda req, tags: req.system_prompt.pop(), ["1 prompt section(s) removed"]),
    ("idle_3", lambda req, tags: None, []),
]


def make_editor() -> type:
    hooks = {}
    for index, (name, edit, _) in enumerate(EDITS):

        async def hook(self, event, req, tag_set, *_, edit=edit):
            edit(req, tag_set)

        hook.__name__ = name
        hooks[name] = on.llm_request(priority=100 - index)(hook)
    return type("Edits", (BasePlugin,), hooks)


def expected(name: str, changes: list[str]) -> None:
    want = next(lines for hook, _, lines in EDITS if hook == name)
    if name == "edits_section":
        assert changes == ["prompt section 'extra' edited: 'Be briefer.'"]
    elif name == "edits_user_prompt":
        assert changes == ["user prompt edited: 'hello again'"]
    else:
        assert changes == want, name


async def test_each_way_of_changing_the_request_shows_its_change_and_idle_hooks_show_none(tmp_path):
    config = {"trace": {"file": str(tmp_path / "traces.jsonl")}}
    async with ChatHarness(plugins=[make_editor()], provider=ScriptedProvider(["<msg>ok</msg>"]), config=config) as bot:
        await bot.send("hi")
        trace = bot.app.tracer.recent(1, kind="turn")[0]
    names = [name for name, _, _ in EDITS]
    calls = {c.function: c for c in trace.hook_calls() if c.event == "llm_request" and c.function in names}
    assert list(calls) == names
    for name, call in calls.items():
        expected(name, call.changes)
    # The JSON-lines file shows the same changes.
    [written] = [t for t in read_json_lines(tmp_path / "traces.jsonl") if t["id"] == trace.id]
    [dispatch] = [i for i in written["timeline"] if i["type"] == "event" and i["event"] == "llm_request"]
    ours = [hook for hook in dispatch["hooks"] if hook["function"] in names]
    assert [hook["function"] for hook in ours] == names
    for hook in ours:
        expected(hook["function"], hook["changes"])


def test_every_change_of_a_tool_set_or_tag_set_moves_its_version_and_no_two_sets_share_one():
    tools = ToolSet()
    seen = {tools.version}
    for change in (lambda: tools.add(Weather()), lambda: tools.remove("weather"), tools.clear):
        before = tools.version
        change()
        assert tools.version != before
        seen.add(tools.version)
    copy = tools.copy()
    assert copy.version not in seen, "a copy is a set of its own"
    unchanged = copy.version
    copy.get("weather"), copy.names(), list(copy), "weather" in copy
    assert copy.version == unchanged, "reading a set does not move its version"

    tags = TagSet()
    seen = {tags.version}
    for change in (lambda: tags.register(Wave()), lambda: tags.unregister("wave")):
        before = tags.version
        change()
        assert tags.version != before
        seen.add(tags.version)
    assert tags.copy().version not in seen


def set_then_put_back(event):
    event.flush()
    event.strategy = MessageStrategy.TRIGGER


#: (hook name, what it does to the message, the strategy the trace shows it set), in the order the hooks run; the
#: message is buffered before them (by the built-in hooks).
STRATEGY_EDITS = [
    ("triggers", lambda event: event.trigger(), {"strategy": "trigger", "force": False}),
    ("triggers_again", lambda event: event.trigger(), None),  # the same strategy: nothing changed
    ("idle", lambda event: None, None),
    ("sets_and_puts_back", set_then_put_back, None),
    ("assigns", lambda event: setattr(event, "strategy", MessageStrategy.FLUSH), {"strategy": "flush", "force": False}),
    ("forces", lambda event: event.buffer(force=True), {"strategy": "buffer", "force": True}),
    ("overruled", lambda event: event.discard(), None),  # a forced strategy stays
    ("idle_again", lambda event: None, None),
    ("unforces", lambda event: setattr(event, "strategy_forced", False), {"strategy": "buffer", "force": False}),
    ("flushes", lambda event: event.flush(), {"strategy": "flush", "force": False}),
]


def make_chooser(event_name: str) -> type:
    hooks = {}
    for index, (name, choose, _) in enumerate(STRATEGY_EDITS):

        async def hook(self, event, *_, choose=choose):
            choose(event)

        hook.__name__ = name
        hooks[name] = getattr(on, event_name)(priority=100 - index)(hook)
    return type("Chooser", (BasePlugin,), hooks)


@pytest.mark.parametrize("event_name", ["im_message", "message_buffered"])
async def test_each_way_of_setting_a_message_strategy_shows_in_the_hook_that_set_it(tmp_path, event_name):
    config = {"trace": {"file": str(tmp_path / "traces.jsonl")}}
    async with ChatHarness(
        plugins=[make_chooser(event_name)], provider=ScriptedProvider(["<msg>ok</msg>"]), config=config
    ) as bot:
        await bot.send("hi")
        trace = bot.app.tracer.recent(1, kind="turn")[0]
    [message] = trace.messages
    names = [name for name, _, _ in STRATEGY_EDITS]
    want = {name: strategy for name, _, strategy in STRATEGY_EDITS}
    calls = {c.function: c for c in message.hook_calls() if c.event == event_name and c.function in names}
    assert {name: call.strategy for name, call in calls.items()} == want and list(calls) == names
    assert calls["forces"].changes == ["strategy flush -> buffer (force)"]
    assert calls["idle"].changes == calls["sets_and_puts_back"].changes == calls["overruled"].changes == []
    # The JSON-lines file shows the same.
    [written] = [t for t in read_json_lines(tmp_path / "traces.jsonl") if t["id"] == trace.id]
    [dispatch] = [i for i in written["messages"][0]["timeline"] if i["type"] == "event" and i["event"] == event_name]
    assert {hook["function"]: hook["strategy"] for hook in dispatch["hooks"] if hook["function"] in names} == want
