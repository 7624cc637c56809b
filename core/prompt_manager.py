"""System prompt sections: `Prompt`, the well-known section names every request starts with, and `UserPrompt`,
the list of prompts a request's user message is built from (which also reads as the text it renders to)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, SupportsIndex

__all__ = ["Prompt", "UserPrompt", "DEFAULT_SECTIONS", "default_system_prompt", "render_system_prompt"]

#: The sections every request's `system_prompt` starts with, in order: KiraAI's names and order, so a plugin finds
#: a section by name (seed 003: "append to an existing section (e.g. "tools", "memory")"). What each holds is in
#: docs/kira-compat.md; an empty one is left out of the system message.
DEFAULT_SECTIONS: tuple[str, ...] = (
    "role",
    "persona",
    "attention",
    "output",
    "format",
    "accounts",
    "sessions",
    "chat_env",
    "memory",
    "tools",
    "time",
)


@dataclass(slots=True)
class Prompt:
    """One named section of a prompt. `source` is the plugin id (or "core") that added it.

    Content is plain text: nothing in it is evaluated or expanded, so a prompt built from user data cannot run code.
    In a request's `user_prompt`, `persist=False` marks a part that goes to the model for this request only and is
    not written to the session's history (KiraAI's meaning); `end` is what follows the content when the parts are
    joined.
    """

    content: str = ""
    name: str = ""
    source: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    persist: bool = True
    end: str = "\n"

    def to_string(self) -> str:
        """The content followed by `end`, as KiraAI joins prompts."""
        return self.content + (self.end or "")

    def __str__(self) -> str:
        return self.content


def _as_prompt(item: Prompt | str) -> Prompt:
    if isinstance(item, Prompt):
        return item
    if isinstance(item, str):
        return Prompt(item, "message", "core")
    raise TypeError(f"a user prompt holds Prompt objects (or str), not {type(item).__name__}")


class UserPrompt(list):
    """The parts of a request's user message: a list of `Prompt` that also reads as the text it renders to.

    KiraAI plugins use it as the list it is (`append(Prompt(...))`, iterate, index, `persist=False` parts); code
    written for a plain string keeps working: `str(p)`, `p == "text"`, `p + "..."`, `p += "..."` (appends a part),
    substring `in`, and the string methods (`p.splitlines()`, `p.strip()`, ...) all act on `text`. `len()` and
    iteration are the list's. A `str` assigned or passed where one is expected becomes one part.
    """

    def __init__(self, items: Iterable[Prompt | str] | str = ()) -> None:
        if isinstance(items, str):
            super().__init__([_as_prompt(items)] if items else [])
        else:
            super().__init__(_as_prompt(i) for i in items)

    @property
    def text(self) -> str:
        """Every part joined as the model receives it: each part's content followed by its `end`, but the last."""
        items = list(self)  # not `if not self`: truth is defined by this text
        if not items:
            return ""
        return "".join(p.to_string() for p in items[:-1]) + items[-1].content

    @property
    def persisted_text(self) -> str:
        """The parts with `persist=True` joined like `text`: what the session's history records."""
        return UserPrompt(p for p in self if p.persist).text

    # -- the list, keeping every item a Prompt ---------------------------------------------------------------------

    def append(self, item: Prompt | str) -> None:
        super().append(_as_prompt(item))

    def insert(self, index: SupportsIndex, item: Prompt | str) -> None:
        super().insert(index, _as_prompt(item))

    def extend(self, items: Iterable[Prompt | str]) -> None:
        super().extend(_as_prompt(i) for i in items)

    def __setitem__(self, index: Any, value: Any) -> None:
        if isinstance(index, slice):
            super().__setitem__(index, [_as_prompt(v) for v in value])
        else:
            super().__setitem__(index, _as_prompt(value))

    def __iadd__(self, other: Any) -> UserPrompt:
        if isinstance(other, str):
            self.append(other)
        else:
            self.extend(other)
        return self

    # -- the string ---------------------------------------------------------------------------------------------

    def __str__(self) -> str:
        return self.text

    def __eq__(self, other: object) -> bool:
        if isinstance(other, str):
            return self.text == other
        return list.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = None  # mutable, like list

    def __contains__(self, item: object) -> bool:
        if isinstance(item, str):
            return item in self.text
        return list.__contains__(self, item)

    def __add__(self, other: Any) -> Any:
        if isinstance(other, str):
            return self.text + other
        return UserPrompt([*self, *other])

    def __radd__(self, other: Any) -> Any:
        if isinstance(other, str):
            return other + self.text
        return NotImplemented

    def __bool__(self) -> bool:
        return bool(self.text)

    def __getattr__(self, name: str) -> Any:
        # Only names a list lacks get here: the string methods (`splitlines`, `strip`, `startswith`, ...).
        if name.startswith("_") or not hasattr(str, name):
            raise AttributeError(f"'UserPrompt' object has no attribute {name!r}")
        return getattr(self.text, name)

    def __repr__(self) -> str:
        return f"UserPrompt({list.__repr__(self)})"


def default_system_prompt(sections: dict[str, str] | None = None) -> list[Prompt]:
    """A fresh list with one `Prompt` per well-known section (content from `sections`, else empty)."""
    sections = sections or {}
    return [Prompt(content=sections.get(name, ""), name=name, source="core") for name in DEFAULT_SECTIONS]


def render_system_prompt(prompts: list[Prompt]) -> str:
    """Join the non-empty sections, in list order, into the system message the model receives."""
    return "\n\n".join(p.content.strip() for p in prompts if p.content and p.content.strip())
