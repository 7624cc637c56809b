"""Every code example of seed 003, run verbatim (the text is read from the seed document) through the testing kit.

The seed's snippets use `BasePlugin`, `KiraMessageBatchEvent` and (in the ToolResult example) `register` without
importing them; the namespace they run in provides those three names and nothing else.
"""

from enum import IntEnum
from pathlib import Path

import pytest

from core.chat import KiraMessageBatchEvent
from core.chat.message_elements import Image, Text
from core.plugin import BasePlugin, Priority, on, register
from core.provider import ToolCall
from core.testing import ChatHarness, ScriptedProvider
from tests.seeds.extract import code_blocks

pytestmark = pytest.mark.anyio

BLOCKS = code_blocks(Path(__file__).parent / "seeds" / "seed_003.txt")
IMPORT, _TABLE, PRIORITY, LISTEN, INJECT, TOOL_DECORATOR, BASE_TOOL, TOOL_RESULT, TAG_DECORATOR, BASE_TAG = BLOCKS


def run(block: str) -> dict:
    namespace = {
        "BasePlugin": BasePlugin,
        "KiraMessageBatchEvent": KiraMessageBatchEvent,
        "register": register,
        "__name__": "seed_example",
    }
    exec(compile(block, "seed_003", "exec"), namespace)
    return namespace


def test_the_import_line_and_the_priority_table_match():
    run(IMPORT)
    seed_priority = run("from enum import IntEnum\n" + PRIORITY)["Priority"]
    assert {p.name: p.value for p in seed_priority} == {p.name: p.value for p in Priority}
    assert issubclass(Priority, IntEnum)


async def test_listening_to_messages():
    plugin = run(LISTEN)["MyPlugin"]
    async with ChatHarness(plugins=[plugin], provider=ScriptedProvider(["heard"])) as bot:
        assert [c.plain_text for c in await bot.send("a keyword here")] == ["heard"]
        chain = bot.app.plugins.hook_chains()["im_message"]
        assert [e["plugin_id"] for e in chain] == ["commands", "chat", "my_plugin"]
        assert chain[2] == {"plugin_id": "my_plugin", "function": "on_message", "priority": 50, "deadline": 10.0}


async def test_injecting_a_prompt():
    plugin = run(INJECT)["MyPlugin"]
    async with ChatHarness(plugins=[plugin], provider=ScriptedProvider(["ok"])) as bot:
        await bot.send("hi")
    req = bot.requests[0]
    assert "You can use my_tool to..." in req.get_prompt("tools").content
    added = req.get_prompt("my_plugin_context")
    assert (added.content, added.source) == ("Additional context injected by the plugin: ...", "my_plugin")
    assert "Additional context injected by the plugin" in req.render_system()


async def test_register_tool_decorator():
    plugin = run(TOOL_DECORATOR)["MyPlugin"]
    provider = ScriptedProvider([[ToolCall("my_tool", {"query": "cats"})], "Found cats."])
    async with ChatHarness(plugins=[plugin], provider=provider) as bot:
        assert [c.plain_text for c in await bot.send("find cats")] == ["Found cats."]
    offered = {t["function"]["name"] for t in provider.requests[0].tool_set.to_openai()}
    assert "my_tool" in offered
    assert provider.requests[1].messages[-1].content == "Query result: cats"


async def test_base_tool_added_per_request():
    plugin = run(BASE_TOOL)["MyPlugin"]
    provider = ScriptedProvider([[ToolCall("my_search", {"query": "tea"})], "Tea."])
    async with ChatHarness(plugins=[plugin], provider=provider) as bot:
        await bot.send("search tea")
        assert "my_search" not in bot.app.plugins.tools, "tool_set.add() applies only to the current request"
    assert provider.requests[1].messages[-1].content == "Search result: tea"


async def test_tool_result_with_attachments(tmp_path):
    seed_plugin = run(TOOL_RESULT)["MyPlugin"]
    shot = tmp_path / "shot.png"
    shot.write_bytes(b"\x89PNG fake")

    class MyPlugin(seed_plugin):
        async def _do_screenshot(self):
            return str(shot)

    seen = []

    class Watch(BasePlugin):
        @on.tool_result()
        async def watch(self, event, result, *_):
            seen.append((result.text, result.attachments, list(event.tool_attachments)))

    provider = ScriptedProvider([[ToolCall("take_screenshot", {})], "Here it is."])
    async with ChatHarness(plugins=[MyPlugin, Watch], provider=provider) as bot:
        await bot.send("screenshot please")
    assert seen == [("Screenshot taken", [Image(path=str(shot))], [Image(path=str(shot))])]
    assert provider.requests[1].messages[-1].content == "Screenshot taken"


async def test_register_tag_decorator():
    plugin = run(TAG_DECORATOR)["MyPlugin"]
    provider = ScriptedProvider(["<msg><my_tag>hello there</my_tag></msg>"])
    async with ChatHarness(plugins=[plugin], provider=provider) as bot:
        chains = await bot.send("hi")
    assert chains[0] == [Text("hello there")]
    assert "Tag description, injected into the LLM's tool instructions" in provider.requests[0].render_system()


async def test_base_tag_registered_per_request():
    namespace = run(BASE_TAG)
    provider = ScriptedProvider(["<msg><my_tag>draw me</my_tag></msg>"])
    async with ChatHarness(plugins=[namespace["MyPlugin"]], provider=provider) as bot:
        chains = await bot.send("hi")
        assert "my_tag" not in bot.app.plugins.tags, "tag_set.register() applies only to the current request"
    assert chains[0] == [Image(path="/tmp/output.png")]
    assert "Process a custom tag and render it as an image" in provider.requests[0].render_system()
