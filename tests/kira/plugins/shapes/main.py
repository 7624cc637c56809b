"""A plugin in KiraAI's style using the shapes KiraAI's runtime calls: `message_sent(event, chain, result)`, a
`BaseTool` whose `execute` takes the event first, and a synthetic message injected with
`message_processor.handle_im_message`; beside a seed-style tool, `execute(self, query)`."""

from core.chat import KiraIMMessage, KiraMessageEvent, MessageChain, Session, User
from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on
from core.utils.tool_utils import BaseTool


class WhereAmI(BaseTool):
    name = "where_am_i"
    description = "Which chat this is"
    parameters = {"type": "object", "properties": {"prefix": {"type": "string"}}, "required": ["prefix"]}

    async def execute(self, event, prefix: str) -> str:
        return f"{prefix} {event.sid}"


class Lookup(BaseTool):
    name = "lookup"
    description = "Look a word up"
    parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

    async def execute(self, query: str) -> str:
        return f"{query}: a word"


class Shapes(BasePlugin):
    async def initialize(self):
        self.sent = []

    async def terminate(self):
        pass

    @on.message_sent()
    async def on_sent(self, event, chain, result):
        self.sent.append((chain.message_repr, result.ok))

    @on.llm_request()
    async def tools(self, event, req, tag_set, *args, **kwargs):
        req.tool_set.add(WhereAmI(ctx=self.ctx))
        req.tool_set.add(Lookup(ctx=self.ctx))

    @on.im_message(priority=Priority.HIGH)
    async def relay(self, event, *args, **kwargs):
        text = event.message_repr
        if text.startswith("/relay "):
            synthetic = KiraIMMessage(
                MessageChain([Text(text[len("/relay ") :])]),
                User("relay", "Relay"),
                Session(event.session.adapter_name, "dm", "relay"),
                is_mentioned=True,
            )
            await self.ctx.message_processor.handle_im_message(KiraMessageEvent(synthetic))
            event.stop()
