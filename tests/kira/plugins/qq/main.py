"""A plugin in KiraAI's style that talks to NapCat directly: `adapter.get_client().send_action(...)`, the raw
OneBot action and its response dict, as KiraAI's QQ adapter hands them to plugins."""

from core.plugin import BasePlugin, register


class QQTools(BasePlugin):
    async def initialize(self):
        pass

    async def terminate(self):
        pass

    @register.tool(
        name="set_card",
        description="Set a member's card (group nickname) in a QQ group",
        params={
            "type": "object",
            "properties": {"group_id": {"type": "string"}, "user_id": {"type": "string"}, "card": {"type": "string"}},
            "required": ["group_id", "user_id", "card"],
        },
    )
    async def set_card(self, event, group_id: str, user_id: str, card: str) -> str:
        adapter = self.ctx.adapter_mgr.get_adapter(event.adapter.name)
        client = adapter.get_client()
        member = await client.send_action(
            "get_group_member_info", {"group_id": int(group_id), "user_id": int(user_id)}, timeout=10.0
        )
        if member.get("status") != "ok":
            return f"failed: {member.get('message') or member.get('wording')}"
        await client.send_action("set_group_card", {"group_id": int(group_id), "user_id": int(user_id), "card": card})
        return f"{member['data']['nickname']} is now {card}"
