from core.chat import KiraMessageEvent
from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on, register
from core.prompt_manager import Prompt


class Shop(BasePlugin):
    @on.im_message(priority=Priority.HIGH)
    async def skip_spam(self, event: KiraMessageEvent, *args, **kwargs):
        if "buy now" in event.message_repr.lower():
            event.stop()  # nothing later runs for this message, nothing is sent

    @on.llm_request()
    async def opening_hours(self, event, req, tag_set, *args, **kwargs):
        req.system_prompt.append(Prompt(content="The shop opens at 9.", name="shop_hours", source="shop"))

    @register.tool(
        name="price",
        description="The price of an item in euros",
        params={"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]},
    )
    async def price(self, event, *_, item: str) -> str:
        return {"apple": "0.50", "pear": "0.70"}.get(item, "unknown")

    @register.tag(name="euro", description="an amount in euros: <euro>0.50</euro>")
    async def euro(self, value: str, **attrs) -> list:
        return [Text(f"{value.strip()} EUR")]
