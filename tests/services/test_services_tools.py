"""The rules every tool obeys however it is registered, the one registration path, role scoping, and tool-level
errors reaching the model."""

import pytest

from core.plugin import BasePlugin, OwnedRegistry, on, register
from core.provider import ToolCall
from core.services import llm_tool, visible_tools
from core.testing import ChatHarness, ScriptedProvider
from core.utils.tool_utils import FunctionTool, ToolDefinitionError

pytestmark = pytest.mark.anyio

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


class Imperative(BasePlugin):
    async def initialize(self):
        async def forecast(*, city: str):
            return {"city": city, "rain": True}

        self.register_llm_tool("forecast", "Tomorrow's weather", CITY, forecast, timeout=10)


async def test_register_llm_tool_and_register_tool_share_one_path():
    class Declared(BasePlugin):
        @register.tool("today", "Today's weather", CITY)
        async def today(self, event, *_, city: str):
            return f"sunny in {city}"

    provider = ScriptedProvider([[ToolCall("forecast", {"city": "Oslo"}), ToolCall("today", {"city": "Rome"})], "ok"])
    async with ChatHarness(plugins=[Imperative, Declared], provider=provider) as bot:
        tools = bot.app.plugins.tools
        assert isinstance(tools.get("forecast"), FunctionTool) and isinstance(tools.get("today"), FunctionTool)
        assert tools.owner_of("forecast") == "imperative" and tools.owner_of("today") == "declared"
        listed = bot.plugin("imperative").list_llm_tools()
        assert [(t["name"], t["timeout"], t["role"], t["active"]) for t in listed] == [("forecast", 10.0, None, True)]
        await bot.send("weather?")
        assert bot.plugin("imperative").unregister_llm_tool("forecast") is True
        assert bot.plugin("imperative").unregister_llm_tool("today") is False, "another plugin's tool is not touched"
        assert "forecast" not in tools and "today" in tools
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == [
        '{"city": "Oslo", "rain": true}',
        "sunny in Rome",
    ]


@pytest.mark.parametrize(
    "name, timeout, message",
    [
        ("has space", 30, "is invalid: use 1 to 64 characters"),
        ("x" * 65, 30, "is invalid"),
        ("", 30, "is invalid"),
        ("ok", 300.5, "at most 300"),
        ("ok", 0, "above 0"),
        ("ok", "30", "number of seconds"),
    ],
)
async def test_a_tool_outside_the_rules_is_refused_with_a_clear_error(name, timeout, message):
    class Bad(BasePlugin):
        pass

    async with ChatHarness(plugins=[Bad], builtins=()) as bot:
        plugin = bot.plugin("bad")
        with pytest.raises(ToolDefinitionError, match=message):
            plugin.register_llm_tool(name, "d", CITY, lambda **_: None, timeout=timeout)
        with pytest.raises(ToolDefinitionError, match="registered by plugin 'bad'"):
            plugin.register_llm_tool(name, "d", CITY, lambda **_: None, timeout=timeout)
        assert len(bot.app.plugins.tools) == 0
    with pytest.raises(ToolDefinitionError, match=message):
        llm_tool(name=name, timeout=timeout)(lambda self: None)


@pytest.mark.parametrize("role", ["", "r" * 65, 7])
async def test_a_bad_schema_or_role_is_refused(role):
    class Bad(BasePlugin):
        pass

    rule = "role must be None \\(global\\) or a persona name of 1 to 64 characters"
    async with ChatHarness(plugins=[Bad], builtins=()) as bot:
        plugin = bot.plugin("bad")
        with pytest.raises(ToolDefinitionError, match="JSON Schema object"):
            plugin.register_llm_tool("t", "d", {"type": "array"}, lambda **_: None)
        with pytest.raises(ToolDefinitionError, match=rule):
            plugin.register_llm_tool("t", "d", CITY, lambda **_: None, role=role)
    with pytest.raises(ToolDefinitionError, match=rule):
        llm_tool(name="t", role=role)(lambda self: None)
    llm_tool(name="t", role="r" * 64)(lambda self: None)  # 64 characters is within the rule


class Personas(BasePlugin):
    """Gives user 'alice' the persona 'alice'; everyone else has none."""

    @on.im_batch_message()
    async def choose_persona(self, event, *args, **kwargs):
        if event.sender and event.sender.user_id == "alice":
            event.role = "alice"

    @llm_tool(name="diary", description="Alice's diary", role="alice")
    async def diary(self):
        return "dear diary"

    @llm_tool(name="clock", description="The time")
    async def clock(self):
        return "noon"


async def test_a_role_scoped_tool_is_offered_only_to_its_persona():
    provider = ScriptedProvider(["hi bob", [ToolCall("diary", {})], "hi alice"])
    async with ChatHarness(plugins=[Personas], provider=provider) as bot:
        await bot.send("hello", user_id="bob")
        await bot.send("hello", user_id="alice")
    bob, alice = provider.requests[0], provider.requests[1]
    assert bob.tool_set.names() == ["clock"]
    assert sorted(alice.tool_set.names()) == ["clock", "diary"]
    assert [m.content for m in provider.requests[2].messages if m.role == "tool"] == ["dear diary"]


def test_a_role_scoped_tool_does_not_hide_a_global_one_of_the_same_name_from_other_personas():
    registry: OwnedRegistry = OwnedRegistry("tool")
    everyone = FunctionTool("search", "global", None, lambda: "g")
    alice_only = FunctionTool("search", "alice", None, lambda: "a", role="alice")
    registry.add("search", everyone, "plugin_a")
    registry.add("search", alice_only, "plugin_b")
    assert visible_tools(registry, "alice") == [alice_only]
    assert visible_tools(registry, "bob") == [everyone]
    assert visible_tools(registry, None) == [everyone]


async def test_a_tool_level_error_dict_reaches_the_model_as_an_error():
    results = []

    class Errs(BasePlugin):
        @llm_tool(name="lookup", parameters=CITY)
        async def lookup(self, *, city: str):
            return {"output": {"tried": city}, "is_error": True, "error": "city not found"}

        @llm_tool(name="fine", parameters=CITY)
        async def fine(self, *, city: str):
            return [city, 1, None]

        @on.tool_result()
        async def seen(self, event, result, *_):
            results.append(result)

    calls = [ToolCall("lookup", {"city": "Atlantis"}), ToolCall("fine", {"city": "Paris"})]
    provider = ScriptedProvider([calls, "sorry"])
    async with ChatHarness(plugins=[Errs], provider=provider) as bot:
        await bot.send("where?")
    assert [(r.tool_name, r.is_error) for r in results] == [("lookup", True), ("fine", False)]
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == [
        'error: city not found\n{"tried": "Atlantis"}',
        '["Paris", 1, null]',
    ]
