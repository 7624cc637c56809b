"""A plugin in KiraAI's style that finds a system-prompt section by its KiraAI name and edits it: the group's
rules go into `chat_env`, next to the platform, group and member information KiraAI puts there."""

from core.plugin import BasePlugin, on


class GroupRules(BasePlugin):
    async def initialize(self):
        self.chat_env = None
        self.names = []

    async def terminate(self):
        pass

    @on.llm_request()
    async def rules(self, event, req, tag_set, *args, **kwargs):
        self.names = [p.name for p in req.system_prompt]
        for prompt in req.system_prompt:
            if prompt.name == "chat_env":
                self.chat_env = prompt.content
                if event.is_group_message():
                    prompt.content += "\n- group rules: no spoilers"
