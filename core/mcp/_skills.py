"""Agent Skills: folders under `[skills] dir`, each with a `SKILL.md` whose YAML front matter gives `name` and
`description`; which skills a session may use (`disabled`, per-skill `allow`/`deny` of session ids, as KiraAI's
`_scope`); the `skills` system-prompt section that lists them; and the tool that reads a file of a skill folder
and nothing else. The built-in `skills` plugin puts the section and the tool in each request.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from core.config import SkillsConfig
from core.provider import ToolResult
from core.tag import MediaPathError, check_media_path
from core.utils.log import get_logger
from core.utils.tool_utils import BaseTool

__all__ = ["Skill", "SkillCatalog", "SkillError", "SkillFileTool", "SKILL_FILE", "MAX_SKILL_FILE_CHARS"]

logger = get_logger("skills")

SKILL_FILE = "SKILL.md"
#: Characters of one skill file the read tool returns; the rest is cut with a note.
MAX_SKILL_FILE_CHARS = 100_000
_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
_MAX_DESCRIPTION = 1024
_FRONT_MATTER = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)


class SkillError(ValueError):
    """A skill folder that cannot be used; the message names its `SKILL.md` and what to fix."""


@dataclass(frozen=True, slots=True)
class Skill:
    """One skill: its `name` and `description` (from the front matter) and its `folder`."""

    name: str
    description: str
    folder: Path

    def to_dict(self) -> dict[str, str]:
        """The skill as JSON data."""
        return {"name": self.name, "description": self.description, "folder": str(self.folder)}


def parse_skill(folder: Path) -> Skill:
    """Read `folder/SKILL.md` and check its front matter; raises `SkillError` naming the file."""
    file = folder / SKILL_FILE
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SkillError(f"{file}: missing (a skill folder needs a {SKILL_FILE})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SkillError(f"{file}: cannot be read: {exc}") from None
    found = _FRONT_MATTER.match(text)
    if found is None:
        raise SkillError(
            f"{file}: no front matter: start the file with a '---' line, then 'name: ...' and "
            "'description: ...', then '---'"
        )
    import yaml  # here, not at the top: only a configured skill folder needs it, and every start imports this module

    try:
        data = yaml.safe_load(found.group(1))
    except yaml.YAMLError as exc:
        raise SkillError(f"{file}: the front matter is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise SkillError(f"{file}: the front matter must be 'key: value' lines (name, description)")
    name, description = data.get("name"), data.get("description")
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise SkillError(f"{file}: name {name!r} is invalid: use 1 to 64 lower-case letters, digits and '-'")
    if not isinstance(description, str) or not description.strip():
        raise SkillError(f"{file}: description is missing: say in one or two sentences when the skill applies")
    if len(description) > _MAX_DESCRIPTION:
        raise SkillError(f"{file}: description is {len(description)} characters; at most {_MAX_DESCRIPTION}")
    return Skill(name, " ".join(description.split()), folder.resolve())


class SkillCatalog:
    """The skills of `config.dir`: `scan()` reads them (a broken folder is reported and skipped), `for_session(sid)`
    the ones a session may use, `prompt(skills)` the `skills` section, `read(skill, path)` one of their files.

    `private` are paths no skill file may resolve into (the data directory, the config file), as for output tags.
    """

    def __init__(self, config: SkillsConfig, *, private: list[Path] | None = None) -> None:
        self.config = config
        self.private = list(private or [])
        self.skills: dict[str, Skill] = {}
        self.errors: list[str] = []

    def scan(self) -> list[Skill]:
        """Read every skill folder (blocking: call it in a worker thread on the loop); returns the skills found."""
        skills: dict[str, Skill] = {}
        errors: list[str] = []
        root = Path(self.config.dir)
        folders = (
            sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
            if root.is_dir()
            else []
        )
        for folder in folders:
            try:
                skill = parse_skill(folder)
            except SkillError as exc:
                errors.append(str(exc))
                logger.error("skill skipped: %s", exc)
                continue
            if skill.name in skills:
                errors.append(
                    f"{folder / SKILL_FILE}: name {skill.name!r} is also used by "
                    f"{skills[skill.name].folder / SKILL_FILE}; give each skill its own name"
                )
                logger.error("skill skipped: %s", errors[-1])
                continue
            skills[skill.name] = skill
        self.skills, self.errors = skills, errors
        return list(skills.values())

    def allowed(self, name: str, sid: str) -> bool:
        """Whether session `sid` may use skill `name`: not disabled, and within its scope (`allow` lists the only
        sessions that may; `deny` the sessions that may not)."""
        if name not in self.skills or name in self.config.disabled:
            return False
        scope = self.config.scope.get(name)
        if not scope:
            return True
        if "allow" in scope:
            return sid in scope["allow"]
        return sid not in scope.get("deny", [])

    def for_session(self, sid: str) -> list[Skill]:
        """The skills session `sid` may use, by name."""
        return [s for name, s in sorted(self.skills.items()) if self.allowed(name, sid)]

    def prompt(self, skills: list[Skill]) -> str:
        """The `skills` system-prompt section listing `skills` and how to use them."""
        lines = [
            "## Skills",
            "You have skills: instructions for particular tasks. Before answering, look at their descriptions.",
            f"If one clearly applies, read its {SKILL_FILE} with the read_skill_file tool and follow it; read "
            "other files of that skill only when its instructions point to them. If none applies, read nothing.",
            "Available skills:",
        ]
        lines += [f"- {s.name}: {s.description}" for s in skills]
        return "\n".join(lines)

    def read(self, name: str, path: str = SKILL_FILE) -> str:
        """The text of `path` inside skill `name`'s folder (blocking). Raises `SkillError` for an unknown skill or
        a path outside the folder (`..`, an absolute path elsewhere, a symlink out), as the media path rules do."""
        skill = self.skills.get(name)
        if skill is None:
            raise SkillError(f"there is no skill called {name!r}")
        try:
            real = check_media_path(path, [skill.folder], self.private)
        except MediaPathError as exc:
            # The reason (with real paths) is for the log; the model learns only that the path is not in the skill.
            logger.warning("read_skill_file refused for skill %r: %s", name, exc)
            raise SkillError(
                f"skill {name!r}: {path!r} is not a file inside the skill's folder (paths are "
                f"relative to it, e.g. {SKILL_FILE})"
            ) from None
        text = real.read_text(encoding="utf-8", errors="replace")
        if len(text) > MAX_SKILL_FILE_CHARS:
            text = text[:MAX_SKILL_FILE_CHARS] + f"\n[cut: the file has {len(text)} characters]"
        return text


class SkillFileTool(BaseTool):
    """`read_skill_file(skill, path)`: a file inside one of the skills offered to this request, and nothing else."""

    name = "read_skill_file"
    timeout = 10.0

    def __init__(self, catalog: SkillCatalog, skills: list[Skill]) -> None:
        self.catalog = catalog
        self.allowed = [s.name for s in skills]
        self.description = (
            f"Read a file of a skill: its {SKILL_FILE} first, then files it names (paths relative to "
            "the skill's folder)."
        )
        self.parameters = {
            "type": "object",
            "properties": {
                "skill": {"type": "string", "enum": self.allowed},
                "path": {"type": "string", "description": f"relative to the skill's folder; default {SKILL_FILE}"},
            },
            "required": ["skill"],
        }
        super().__init__()

    async def execute(self, **params: Any) -> ToolResult:
        """Read the file in a worker thread; a refused path is an error the model sees."""
        name, path = params["skill"], params.get("path") or SKILL_FILE
        if name not in self.allowed:
            return ToolResult(text=f"error: the skill {name!r} is not available here", is_error=True)
        try:
            return ToolResult(text=await anyio.to_thread.run_sync(self.catalog.read, name, path))
        except (SkillError, OSError) as exc:
            return ToolResult(text=f"error: {exc}", is_error=True)
