"""A plugin in KiraAI's style on the output path: `after_xml_parse` over the list of chains KiraAI's runtime
passes, mentions read by `pid`, a tag that answers with `Image(image=...)` and a caption."""

from core.chat import MessageChain
from core.chat.message_elements import At, Image, Text
from core.plugin import BasePlugin, Priority, on, register

PIXEL = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="


class OutputRewriter(BasePlugin):
    async def initialize(self):
        self.mentioned = []
        self.tag_names = []

    async def terminate(self):
        pass

    @on.llm_request()
    async def list_tags(self, event, req, tag_set, *args, **kwargs):
        self.tag_names = [t.name for t in tag_set.get_all()]

    @on.after_xml_parse(priority=Priority.LOW)
    async def fix_output(self, event, chains: list[MessageChain], *args, **kwargs):
        for chain in chains:
            for element in chain.message_list:
                if isinstance(element, At):
                    self.mentioned.append(element.pid)
        chains[:] = [c for c in chains if not any(isinstance(e, Text) and "secret" in e.text.lower() for e in c)]
        chains.append(MessageChain([Text("(end of reply)")]))

    @register.tag(name="pixel", description="Show a one-pixel picture")
    async def pixel(self, value: str, **kwargs):
        return [Image(image=PIXEL, caption=value or "a pixel")]
