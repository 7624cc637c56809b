"""System prompt sections: `Prompt` and the well-known section names every request starts with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Prompt", "DEFAULT_SECTIONS", "default_system_prompt", "render_system_prompt"]

#: The sections every request's `system_prompt` starts with, in order. Plugins find them by name (seed 003:
#: "append to an existing section (e.g. "tools", "memory")").
DEFAULT_SECTIONS: tuple[str, ...] = ("role", "persona", "format", "tools", "memory", "time")


@dataclass(slots=True)
class Prompt:
    """One named section of the system prompt. `source` is the plugin id (or "core") that added it.

    Content is plain text: nothing in it is evaluated or expanded, so a prompt built from user data cannot run code.
    """

    content: str = ""
    name: str = ""
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.content


def default_system_prompt(sections: dict[str, str] | None = None) -> list[Prompt]:
    """A fresh list with one `Prompt` per well-known section (content from `sections`, else empty)."""
    sections = sections or {}
    return [Prompt(content=sections.get(name, ""), name=name, source="core") for name in DEFAULT_SECTIONS]


def render_system_prompt(prompts: list[Prompt]) -> str:
    """Join the non-empty sections, in list order, into the system message the model receives."""
    return "\n\n".join(p.content.strip() for p in prompts if p.content and p.content.strip())
