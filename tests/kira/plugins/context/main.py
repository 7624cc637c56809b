"""A plugin in KiraAI's style: the application's config read in __init__, the model asked from a tool through the
context's LLM clients, another plugin found by id, the data path read at import time."""

from core.agent.message import OpenAIMessage
from core.plugin import BasePlugin, logger, register
from core.provider import LLMRequest
from core.utils.path_utils import get_data_path

DATA_AT_IMPORT = get_data_path()


class ContextProbe(BasePlugin):
    def __init__(self, ctx, cfg: dict):
        super().__init__(ctx, cfg)
        bot_cfg = ctx.config["bot_config"].get("bot", {})
        self.max_buffer = int(bot_cfg.get("max_buffer_messages"))
        self.max_tool_loop = ctx.config.get_config("bot_config.agent.max_tool_loop", 2)
        self.greeting = self.plugin_cfg["greeting"]

    async def initialize(self):
        self.lang = self.ctx.get_lang()
        self.default_client = self.ctx.get_default_llm_client()
        self.fast_client = self.ctx.get_default_fast_llm_client()

    async def terminate(self):
        pass

    @register.tool(
        name="ask_model",
        description="Ask the model a side question",
        params={"type": "object", "properties": {"question": {"type": "string"}}, "required": ["question"]},
    )
    async def ask_model(self, event, *_, question: str) -> str:
        client = self.ctx.get_llm_client(model_uuid=self.default_client.model.uuid)
        request = LLMRequest(messages=[OpenAIMessage(role="user", content=question)])
        response = await client.chat(request)
        logger.info("side answer: %s", response.text_response)
        return f"side answer: {response.text_response}"

    def partner(self):
        return self.ctx.get_plugin_inst("kira_web")
