"""Seed 000: the `@llm_tool` example runs unmodified as a plugin folder, the model calls it, and the imperative API
and the tool rules behave as the seed says."""

import pytest

from core.provider import ToolCall
from core.testing import BUILTIN_PLUGINS_DIR, ChatHarness, ScriptedProvider
from core.utils.tool_utils import ToolDefinitionError
from plugin.sdk.plugin import NekoPluginBase, llm_tool, neko_plugin
from tests.sdk.seed_snippets import SEED_000, block, method, snippet, write_plugin

pytestmark = pytest.mark.anyio

WEATHER = BUILTIN_PLUGINS_DIR / "examples" / "weather"


def test_the_example_plugin_folder_holds_the_seed_example_verbatim():
    assert (WEATHER / "main.py").read_text() == block(SEED_000, "class WeatherPlugin")


async def test_the_model_calls_get_weather_of_the_seed_example():
    provider = ScriptedProvider([[ToolCall("get_weather", {"city": "Paris"}, id="w1")], "It is sunny in Paris."])
    async with ChatHarness(plugins=[WEATHER], provider=provider) as bot:
        assert bot.app.plugins.status("weather").state == "loaded"
        chains = await bot.send("What is the weather in Paris?")
        offered = provider.requests[0].tool_set.get("get_weather")
        assert offered.parameters["required"] == ["city"] and offered.description.startswith("Look up the weather")
        await bot.app.plugins.disable("weather")
        assert "get_weather" not in bot.app.plugins.tools, "cleanup on stop"
    assert [c.plain_text for c in chains] == ["It is sunny in Paris."]
    [tool_message] = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert tool_message.tool_call_id == "w1"
    assert tool_message.content == '{"city": "Paris", "temp_c": 22, "weather": "sunny"}'


async def test_the_imperative_api_of_the_seed(tmp_path):
    register = snippet("self.register_llm_tool(", ")", SEED_000).replace("{...}", '{"q": {"type": "string"}}')
    members = [
        method(
            "use_api",
            "async def my_callable(**kwargs):\n    return {'custom': kwargs}",
            register,
            "listed = " + snippet("self.list_llm_tools()", "self.list_llm_tools()", SEED_000).split("#")[0],
            snippet('self.unregister_llm_tool("custom")', 'self.unregister_llm_tool("custom")', SEED_000),
        ),
    ]
    folder = write_plugin(tmp_path / "plugins", "imperative", "ImperativePlugin", members)
    async with ChatHarness(plugins=[folder], builtins=()) as bot:
        result = await bot.plugin("imperative").use_api()
        assert "custom" not in bot.app.plugins.tools, "unregister_llm_tool removed it"
        assert bot.plugin("imperative").list_llm_tools() == []
    [listed] = result["listed"]  # what list_llm_tools() said while it was registered
    assert listed == {
        "name": "custom",
        "description": "...",
        "timeout": 30.0,
        "role": None,
        "owner": "imperative",
        "remote": False,
        "active": True,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }


async def test_a_tool_registered_imperatively_is_called_by_the_model():
    class Runtime(NekoPluginBase):
        async def build(self):
            async def my_callable(**kwargs):
                return {"custom": kwargs}

            self.register_llm_tool(
                name="custom",
                description="...",
                handler=my_callable,
                timeout=30.0,
                role=None,
                parameters={"type": "object", "properties": {"q": {"type": "string"}}},
            )

    provider = ScriptedProvider([[ToolCall("custom", {"q": "x"})], "done"])
    async with ChatHarness(plugins=[Runtime], provider=provider) as bot:
        await bot.plugin("runtime").build()
        await bot.send("go")
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == ['{"custom": {"q": "x"}}']


def test_the_decorator_enforces_the_seed_rules():
    with pytest.raises(ToolDefinitionError, match="is invalid"):
        llm_tool(name="no/slashes")(lambda self: None)
    with pytest.raises(ToolDefinitionError, match="at most 300"):
        llm_tool(name="ok", timeout=301)(lambda self: None)

    @neko_plugin
    class Defaults(NekoPluginBase):
        @llm_tool(description="named after the method")
        async def method_name(self):
            return None

    meta = Defaults.method_name.__hookchat_llm_tool__
    assert (meta.name, meta.timeout, meta.role) == ("method_name", 30.0, None)
    assert meta.parameters == {"type": "object", "properties": {}, "required": []}
