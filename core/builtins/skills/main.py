"""Agent Skills in each request, an ordinary plugin: the skills of `[skills] dir` that the session may use are
listed in a `skills` system-prompt section, and `read_skill_file` (a per-request tool) reads their files and
nothing else. The app loads it when the skills folder exists (docs/skills.md)."""

from __future__ import annotations

import anyio

from core.mcp import SkillCatalog, SkillFileTool
from core.plugin import BasePlugin, on
from core.prompt_manager import Prompt


class SkillsPlugin(BasePlugin):
    """Scans the skills folder when it starts (`reload` it to scan again) and offers the session's skills."""

    async def initialize(self) -> None:
        app = self.ctx.app
        config = app.config if app is not None else None
        if config is None:
            self.catalog = None
            return
        private = [config.data.dir, *([config.file] if config.file is not None else [])]
        self.catalog = SkillCatalog(config.skills, private=private)
        found = await anyio.to_thread.run_sync(self.catalog.scan)
        self.logger.info(
            "skills: {} found in {}{}",
            len(found),
            config.skills.dir,
            f" ({len(self.catalog.errors)} skipped: see the errors above)" if self.catalog.errors else "",
        )

    @on.llm_request()
    async def offer_skills(self, event, req, tag_set, *args, **kwargs):
        """List the session's skills in the `skills` section and add the tool that reads them."""
        if self.catalog is None:
            return
        skills = self.catalog.for_session(event.sid)
        if not skills:
            return
        req.system_prompt.append(Prompt(self.catalog.prompt(skills), "skills", "skills"))
        req.tool_set.add(SkillFileTool(self.catalog, skills))
