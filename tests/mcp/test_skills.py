"""Agent Skills: folders with a `SKILL.md` are checked, listed in a `skills` prompt section for the sessions that may
use them, and read through a tool that reads inside a skill folder and nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import SkillsConfig
from core.mcp import SkillCatalog, SkillError, parse_skill
from core.provider import ToolCall
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


def make_skills(root: Path) -> Path:
    skills = root / "skills"
    (skills / "weather" / "notes").mkdir(parents=True)
    (skills / "weather" / "SKILL.md").write_text(
        "---\nname: weather\ndescription: >\n  Use when the user asks about the weather.\n---\n\n"
        "# Weather\nRead notes/cities.md for the list of cities.\n"
    )
    (skills / "weather" / "notes" / "cities.md").write_text("Paris, Tokyo\n")
    (root / "secret.txt").write_text("the operator's secret\n")
    (skills / "weather" / "leak.md").symlink_to(root / "secret.txt")
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("---\nname: broken\n---\nno description\n")
    return skills


def tool_messages(provider: ScriptedProvider, request: int) -> list[str]:
    return [m.content for m in provider.requests[request].messages if m.role == "tool"]


def test_front_matter_is_checked_and_the_error_names_the_file(tmp_path):
    skills = make_skills(tmp_path)
    assert parse_skill(skills / "weather").description == "Use when the user asks about the weather."
    with pytest.raises(SkillError, match=r"broken/SKILL\.md: description is missing"):
        parse_skill(skills / "broken")
    (skills / "broken" / "SKILL.md").write_text("# no front matter\n")
    with pytest.raises(SkillError, match=r"broken/SKILL\.md: no front matter"):
        parse_skill(skills / "broken")
    catalog = SkillCatalog(SkillsConfig(dir=skills))
    assert [s.name for s in catalog.scan()] == ["weather"]
    assert len(catalog.errors) == 1 and "broken/SKILL.md" in catalog.errors[0]


def test_scope_allows_or_denies_sessions_as_kiraais(tmp_path):
    skills = make_skills(tmp_path)
    allow = SkillCatalog(SkillsConfig(dir=skills, scope={"weather": {"allow": ["qq:gm:1"]}}))
    deny = SkillCatalog(SkillsConfig(dir=skills, scope={"weather": {"deny": ["qq:gm:1"]}}))
    off = SkillCatalog(SkillsConfig(dir=skills, disabled=["weather"]))
    for catalog in (allow, deny, off):
        catalog.scan()
    assert [s.name for s in allow.for_session("qq:gm:1")] == ["weather"] and allow.for_session("qq:dm:2") == []
    assert deny.for_session("qq:gm:1") == [] and [s.name for s in deny.for_session("qq:dm:2")] == ["weather"]
    assert off.for_session("qq:dm:2") == []


async def test_the_model_sees_the_section_and_reads_inside_the_skill_folder_only(tmp_path):
    skills = make_skills(tmp_path)
    provider = ScriptedProvider(
        [
            [
                ToolCall("read_skill_file", {"skill": "weather"}),
                ToolCall("read_skill_file", {"skill": "weather", "path": "notes/cities.md"}),
                ToolCall("read_skill_file", {"skill": "weather", "path": "../../secret.txt"}),
                ToolCall("read_skill_file", {"skill": "weather", "path": str(tmp_path / "secret.txt")}),
                ToolCall("read_skill_file", {"skill": "weather", "path": "leak.md"}),
            ],
            "done",
            "second",
        ]
    )
    config = {"skills": {"dir": str(skills), "scope": {"weather": {"deny": ["test:dm:bob"]}}}}
    async with ChatHarness(provider=provider, config=config) as bot:
        await bot.send("weather?")
        await bot.send("and you?", user_id="bob")
        sid_bob = bot.message("x", user_id="bob").session.sid
    section = provider.requests[0].get_prompt("skills")
    assert section is not None and "- weather: Use when the user asks about the weather." in section.content
    assert "broken" not in section.content
    skill_md, cities, up, absolute, link = tool_messages(provider, 1)
    assert skill_md.startswith("---\nname: weather") and cities == "Paris, Tokyo\n"
    for refused in (up, absolute, link):
        assert refused.startswith("error: skill 'weather': ")
        assert "the operator's secret" not in refused
    # a session the scope denies gets neither the section nor the tool
    assert sid_bob == "test:dm:bob"
    assert provider.requests[2].get_prompt("skills") is None
    assert "read_skill_file" not in provider.requests[2].tool_set
