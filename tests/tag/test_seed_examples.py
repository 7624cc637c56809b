"""The two tag examples of seed 003 ("Tag Registration"), run verbatim: a `@register.tag` method and a `BaseTag`
subclass registered per request with `tag_set.register(...)`."""

from __future__ import annotations

import pytest

from core.chat.message_elements import Image, Text
from core.plugin import BasePlugin, PluginContext, PluginLoader
from core.provider import LLMRequest
from core.tag import FunctionTag, TagSet, parse_output

METHOD_1 = """
from core.plugin import register
from core.chat.message_elements import Text

class MyPlugin(BasePlugin):
    @register.tag(
        name="my_tag",
        description="Tag description, injected into the LLM's tool instructions"
    )
    async def handle_my_tag(self, value: str, **kwargs) -> list:
        # value is the tag content, e.g. <my_tag>value</my_tag>
        # Returns list[BaseMessageElement]
        return [Text(value)]
"""

METHOD_2 = """
from core.tag import BaseTag
from core.provider import LLMRequest
from core.chat.message_elements import Image
from core.plugin import on

class MyTag(BaseTag):
    name = "my_tag"
    description = "Process a custom tag and render it as an image"

    async def handle(self, value: str, **kwargs) -> list:
        # self.ctx is available (passed in at registration time)
        image_path = await self._render(value)
        return [Image(path=image_path)]

    async def _render(self, content: str) -> str:
        # Complex rendering logic...
        return "/tmp/output.png"


class MyPlugin(BasePlugin):
    @on.llm_request()
    async def add_tags(self, event, req: LLMRequest, tag_set, *args, **kwargs):
        tag_set.register(MyTag(ctx=self.ctx))
"""


def run_example(code: str) -> dict:
    namespace = {"BasePlugin": BasePlugin, "__name__": "seed_example"}
    exec(compile(code, "<seed 003>", "exec"), namespace)  # the seed's code, verbatim
    return namespace


@pytest.mark.anyio
async def test_register_tag_method() -> None:
    MyPlugin = run_example(METHOD_1)["MyPlugin"]
    plugin = MyPlugin(PluginContext("my_plugin"), {})
    meta = MyPlugin.handle_my_tag.__hookchat_tag__
    tag = FunctionTag(meta.name, meta.description, plugin.handle_my_tag, ctx=plugin.ctx)
    tags = TagSet([tag])
    assert tag.owner == "my_plugin"
    assert "- <my_tag>: Tag description, injected into the LLM's tool instructions" in tags.to_prompt()
    assert await parse_output("<msg><my_tag>value</my_tag></msg>", tags) == [[Text("value")]]


@pytest.mark.anyio
async def test_register_tag_method_through_the_plugin_manager(tmp_path) -> None:
    MyPlugin = run_example(METHOD_1)["MyPlugin"]
    manager = PluginLoader(data_dir=tmp_path, entry_points=False)
    manager.add_class(MyPlugin, "my_plugin")
    try:
        assert (await manager.load("my_plugin")).state == "loaded"
        tag = manager.tags.get("my_tag")
        assert isinstance(tag, FunctionTag) and tag.owner == "my_plugin"
        assert await parse_output("<my_tag>hi</my_tag>", TagSet([tag])) == [[Text("hi")]]
    finally:
        await manager.shutdown()


@pytest.mark.anyio
async def test_base_tag_registered_per_request() -> None:
    example = run_example(METHOD_2)
    plugin = example["MyPlugin"](PluginContext("my_plugin"), {})
    tag_set = TagSet()
    await plugin.add_tags(None, LLMRequest(), tag_set)
    tag = tag_set.get("my_tag")
    assert isinstance(tag, example["MyTag"]) and tag.ctx is plugin.ctx and tag.owner == "my_plugin"
    assert await parse_output("<msg>Look: <my_tag>a chart</my_tag></msg>", tag_set) == [
        [Text("Look: "), Image(path="/tmp/output.png")]
    ]
