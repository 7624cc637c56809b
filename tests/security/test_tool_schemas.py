"""Tool schemas are untrusted input: they never make hookchat fetch a URL, a broken one never crashes a turn,
a pathological `pattern` never freezes the event loop, and the model hears every argument error at once."""

from __future__ import annotations

import pytest

from core.plugin import BasePlugin, on
from core.provider import ToolCall
from core.testing import ChatHarness, ScriptedProvider
from core.utils import signals
from core.utils.tool_utils import BaseTool, FunctionTool, ToolDefinitionError

pytestmark = pytest.mark.anyio


async def _echo(**kwargs: object) -> str:
    return "ran"


def _tool_plugin(tool: BaseTool) -> type[BasePlugin]:
    """A plugin that offers `tool` in every request."""

    class Offers(BasePlugin):
        @on.llm_request()
        async def add(self, event, req, tag_set, *_):
            req.tool_set.add(tool)

    return Offers


def _tool_messages(provider: ScriptedProvider) -> list[str]:
    return [m.content for m in provider.requests[-1].messages if m.role == "tool"]


def test_a_remote_ref_is_refused_at_registration_naming_the_tool(counting_server) -> None:
    schema = {"type": "object", "properties": {"city": {"$ref": f"{counting_server.url}/city.json"}}}

    with pytest.raises(ToolDefinitionError) as caught:
        FunctionTool("weather", "Weather", schema, _echo)

    assert "'weather'" in str(caught.value) and "$ref" in str(caught.value)
    assert counting_server.hits == []


def test_local_refs_are_still_accepted() -> None:
    schema = {"type": "object", "$defs": {"city": {"type": "string"}}, "properties": {"city": {"$ref": "#/$defs/city"}}}
    assert FunctionTool("weather", "Weather", schema, _echo).parameters == schema


async def test_validating_arguments_never_fetches_a_ref(counting_server) -> None:
    # A schema changed after registration (or by a tool that skipped the rules) still cannot reach the network.
    tool = FunctionTool("weather", "Weather", {"type": "object"}, _echo, pass_event=False)
    tool.parameters = {"type": "object", "properties": {"city": {"$ref": f"{counting_server.url}/city.json"}}}
    provider = ScriptedProvider([[ToolCall("weather", {"city": "Oslo"})], "<msg>done</msg>"])

    async with ChatHarness([_tool_plugin(tool)], provider) as bot:
        replies = await bot.send("weather?")

    assert counting_server.hits == []
    assert [c.message_repr for c in replies] == ["done"]
    [text] = _tool_messages(provider)
    assert text.startswith("error:") and "weather" in text


async def test_an_unresolvable_ref_is_an_error_result_and_the_turn_is_stored() -> None:
    tool = FunctionTool("weather", "Weather", {"type": "object"}, _echo, pass_event=False)
    tool.parameters = {"type": "object", "properties": {"city": {"$ref": "#/$defs/missing"}}}
    provider = ScriptedProvider([[ToolCall("weather", {"city": "Oslo"})], "<msg>sorry</msg>"])

    async with ChatHarness([_tool_plugin(tool)], provider) as bot:
        replies = await bot.send("weather?")
        stored = await bot.app.history.get_history("test:dm:user")

    assert [c.message_repr for c in replies] == ["sorry"]
    assert "schema is broken" in _tool_messages(provider)[0]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]


async def test_every_invalid_argument_is_reported_in_one_message() -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}, "days": {"type": "integer"}},
        "required": ["city", "days", "units"],
    }
    tool = FunctionTool("forecast", "Forecast", schema, _echo, pass_event=False)
    provider = ScriptedProvider([[ToolCall("forecast", {"city": 7, "days": "two"})], "<msg>ok</msg>"])

    async with ChatHarness([_tool_plugin(tool)], provider) as bot:
        await bot.send("forecast?")

    [text] = _tool_messages(provider)
    assert text.startswith("error: invalid arguments for forecast:")
    assert "city: 7 is not of type 'string'" in text
    assert "days: 'two' is not of type 'integer'" in text
    assert "'units' is a required property" in text


async def test_a_catastrophic_pattern_does_not_block_the_event_loop(record_stalls) -> None:
    # `re` needs about ten seconds for this match, holding the GIL (so even a worker thread would freeze the loop).
    schema = {"type": "object", "properties": {"code": {"type": "string", "pattern": "^(a|aa)+$"}}}
    tool = FunctionTool("lookup", "Lookup", schema, _echo, pass_event=False)
    provider = ScriptedProvider([[ToolCall("lookup", {"code": "a" * 38 + "!"})], "<msg>ok</msg>"])

    async with ChatHarness([_tool_plugin(tool)], provider, {"deadlines": {"stall_threshold": 0.3}}) as bot:
        stalls = record_stalls(bot.app.engine)
        replies = await bot.send("look it up")

    assert [c.message_repr for c in replies] == ["ok"]
    assert "could not be checked against the pattern" in _tool_messages(provider)[0]
    assert stalls == []


@pytest.fixture
def record_stalls():
    """`record_stalls(engine)`: the list of loop stalls the engine's watchdog reports from then on."""
    kept = []

    def start(engine):
        stalls: list[dict] = []

        def receiver(sender, **kwargs):
            stalls.append(kwargs)

        kept.append(receiver)
        signals.loop_stalled.connect(receiver, sender=engine)
        return stalls

    yield start
    for receiver in kept:
        signals.loop_stalled.disconnect(receiver)
