"""A plugin in KiraAI's style on the message path: strategies chosen from KiraAI's event fields, the buffer read
through the context, the batch's `message_str` rewritten, a request-only prompt that history does not keep."""

from core.chat import KiraMessageBatchEvent, KiraMessageEvent
from core.plugin import BasePlugin, Priority, on
from core.prompt_manager import Prompt
from core.provider import LLMRequest
from core.provider.llm_model import DYNAMIC_PROMPT_NAMES


class DefaultChatZ(BasePlugin):
    async def initialize(self):
        self.seen = []
        self.batch_seen = []
        self.dynamic_sections = []

    async def terminate(self):
        pass

    @on.im_message(priority=Priority.HIGH)
    async def choose(self, event: KiraMessageEvent, *args, **kwargs):
        self.seen.append(
            {
                "group": event.is_group_message(),
                "self_id": event.message.self_id,
                "notice": event.is_notice,
                "adapter": event.adapter.name,
            }
        )
        sid = event.session.sid
        waiting = self.ctx.get_buffer(sid).get_length()
        if "flush" in event.message_repr and waiting:
            event.buffer()
            await self.ctx.message_processor.flush_session_messages(sid)
            return
        event.buffer(force=True)

    @on.im_batch_message()
    async def rewrite(self, event: KiraMessageBatchEvent, *args, **kwargs):
        for message in event.messages:
            self.batch_seen.append(message.message_str)
            message.message_str = f"(via {event.adapter.name}) {message.message_str}"

    @on.llm_request()
    async def add_context(self, event, req: LLMRequest, tag_set, *args, **kwargs):
        self.dynamic_sections = [p.name for p in req.system_prompt if p.name in DYNAMIC_PROMPT_NAMES]
        req.user_prompt.append(
            Prompt("[only for this request]", name="kira_reminder", source="default-chat（z）", persist=False)
        )
