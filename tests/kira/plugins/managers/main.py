"""A plugin in KiraAI's style over KiraAI's module paths and managers: `core.logging_manager`, `core.persona`,
`core.sticker_manager`, and `ctx.plugin_mgr` to list plugins and disable one."""

from core.logging_manager import get_logger
from core.persona import PersonaManager
from core.persona.model import PersonaInfo
from core.plugin import BasePlugin, register
from core.sticker_manager import StickerManager

logger = get_logger("kira_managers", "cyan")


class Managers(BasePlugin):
    async def initialize(self):
        persona = await self.ctx.persona_mgr.get_persona()
        self.checks = {
            "persona model": isinstance(persona, PersonaInfo),
            "persona manager": isinstance(self.ctx.persona_mgr, PersonaManager),
            "sticker manager": isinstance(self.ctx.sticker_manager, StickerManager),
        }
        logger.info(f"managers ready, persona {persona.id}")

    async def terminate(self):
        pass

    @register.tool(
        name="plugins", description="List the plugins", params={"type": "object", "properties": {}, "required": []}
    )
    async def plugins(self, event, *args) -> str:
        return ", ".join(f"{p.plugin_id}={p.status}" for p in self.ctx.plugin_mgr.list_plugins())

    @register.tool(
        name="switch_off",
        description="Disable a plugin",
        params={"type": "object", "properties": {"plugin_id": {"type": "string"}}, "required": ["plugin_id"]},
    )
    async def switch_off(self, event, plugin_id: str) -> str:
        await self.ctx.plugin_mgr.set_plugin_enabled(plugin_id, False)
        return f"{plugin_id} enabled: {self.ctx.plugin_mgr.is_plugin_enabled(plugin_id)}"

    @register.tool(
        name="add_sticker",
        description="Add the sticker file dog.png",
        params={"type": "object", "properties": {}, "required": []},
    )
    async def add_sticker(self, event, *args) -> str:
        await self.ctx.sticker_manager.register_sticker("dog.png", "a sleepy dog")
        return "added"
