"""A plugin in KiraAI's style over adapters and sessions: sends through an adapter it looks up, reads and edits a
session's history, publishes a notice, reads the persona and the models."""

from core.adapter.adapter_utils import IMAdapter
from core.chat import MessageChain
from core.chat.message_elements import Text
from core.plugin import BasePlugin, register


class SessionTools(BasePlugin):
    async def initialize(self):
        self.persona = await self.ctx.persona_mgr.get_persona()
        self.default_model = self.ctx.provider_mgr.get_default_llm().model.model_id

    async def terminate(self):
        pass

    @register.tool(
        name="tell_group",
        description="Send a text to a group of the same adapter",
        params={
            "type": "object",
            "properties": {"group_id": {"type": "string"}, "text": {"type": "string"}},
            "required": ["group_id", "text"],
        },
    )
    async def tell_group(self, event, *_, group_id: str, text: str) -> str:
        adapter = self.ctx.adapter_mgr.get_adapter(event.session.adapter_name)
        if not isinstance(adapter, IMAdapter):
            return "no such adapter"
        result = await adapter.send_group_message(group_id, MessageChain([Text(text)]))
        return f"sent: {result.ok}"

    @register.tool(
        name="count_turns",
        description="How many turns this chat has",
        params={"type": "object", "properties": {}, "required": []},
    )
    async def count_turns(self, event, *_) -> str:
        memory = await self.ctx.session_mgr.read_memory(event.sid)
        return f"{len(memory)} turns"

    async def forget_last_turn(self, sid: str) -> int:
        memory = await self.ctx.session_mgr.read_memory(sid)
        await self.ctx.session_mgr.write_memory(sid, memory[:-1])
        return len(memory) - 1

    async def remind(self, sid: str, text: str) -> None:
        await self.ctx.publish_notice(session=sid, chain=MessageChain([Text(text)]), is_mentioned=True)
