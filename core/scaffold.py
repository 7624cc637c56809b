"""`hookchat new-plugin NAME`: write a working plugin skeleton (manifest, schema, a hook, a tool, a tag, a test)."""

from __future__ import annotations

import json
from pathlib import Path

import core

__all__ = ["write_plugin_skeleton"]

_MAIN = '''"""{plugin_id}: a hookchat plugin."""

from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on, register
from core.prompt_manager import Prompt


class {class_name}(BasePlugin):
    """Greets, offers a tool, and renders a <shout> tag."""

    @on.llm_request(priority=Priority.MEDIUM)
    async def add_context(self, event, req, tag_set, *args, **kwargs):
        req.system_prompt.append(Prompt(content=self.cfg["greeting"], name="{plugin_id}", source="{plugin_id}"))

    @register.tool(
        name="{plugin_id}_add",
        description="Add two integers",
        params={{
            "type": "object",
            "properties": {{"a": {{"type": "integer"}}, "b": {{"type": "integer"}}}},
            "required": ["a", "b"],
        }},
    )
    async def add(self, event, *_, a: int, b: int) -> str:
        return str(a + b)

    @register.tag(name="shout", description="<shout>text</shout> sends the text in capitals")
    async def shout(self, value: str, **attrs) -> list:
        return [Text(value.upper())]
'''

_TEST = """from pathlib import Path

from core.testing import ChatHarness, ScriptedProvider, ToolCall

PLUGIN = Path(__file__).resolve().parent.parent


async def test_the_tool_and_the_tag_work():  # hookchat's pytest plugin runs it on asyncio
    model = ScriptedProvider([[ToolCall("{plugin_id}_add", {{"a": 2, "b": 3}})], "<msg><shout>it is 5</shout></msg>"])
    async with ChatHarness(plugins=[PLUGIN], provider=model) as bot:
        chains = await bot.send("what is 2 + 3?")
    assert [c.plain_text for c in chains] == ["IT IS 5"]
    assert model.requests[1].messages[-1].content == "5"
    assert "Hello from {plugin_id}" in model.requests[0].render_system()
"""


def write_plugin_skeleton(folder: Path, plugin_id: str) -> None:
    """Create `folder` with a plugin called `plugin_id` whose test passes as written."""
    class_name = "".join(part.capitalize() for part in plugin_id.split("_")) + "Plugin"
    (folder / "tests").mkdir(parents=True)
    manifest = {
        "plugin_id": plugin_id,
        "display_name": plugin_id.replace("_", " ").title(),
        "version": "0.1.0",
        "author": "",
        "description": "A hookchat plugin.",
        "core_version": f">={core.__version__},<1",
    }
    schema = {"greeting": {"type": "string", "default": f"Hello from {plugin_id}.", "description": "Prompt text."}}
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    (folder / "schema.json").write_text(json.dumps(schema, indent=2) + "\n", encoding="utf-8")
    (folder / "main.py").write_text(_MAIN.format(plugin_id=plugin_id, class_name=class_name), encoding="utf-8")
    (folder / "tests" / f"test_{plugin_id}.py").write_text(_TEST.format(plugin_id=plugin_id), encoding="utf-8")
