"""System prompt sections: `Prompt`, the well-known section names every request starts with, and `UserPrompt`,
the list of prompts a request's user message is built from (which also reads as the text it renders to)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import TYPE_CHECKING, Any, SupportsIndex

__all__ = [
    "Prompt",
    "PromptEdits",
    "PROMPT_EDITS",
    "section_fields",
    "part_fields",
    "UserPrompt",
    "DEFAULT_SECTIONS",
    "default_system_prompt",
    "render_system_prompt",
]

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


class PromptEdits:
    """How many times a watched field of any `Prompt` has been assigned, in this process: a trace compares this
    count, and the identities of a request's sections, rather than every section's fields before and after each
    `llm_request` hook (a count that has not moved means no section was edited in place)."""

    __slots__ = ("count",)

    def __init__(self) -> None:
        self.count = 0


#: The one count of edits every `Prompt` moves (an object's slot: writing a module global or a class attribute would
#: invalidate the interpreter's caches of every function that reads them).
PROMPT_EDITS = PromptEdits()


def _watched(slot: str, doc: str) -> Any:
    """A `Prompt` field read from `slot` and counted in `PROMPT_EDITS` when assigned."""

    def assign(prompt: Prompt, value: Any) -> None:
        setattr(prompt, slot, value)
        PROMPT_EDITS.count += 1

    # `attrgetter`: a read through a property runs no Python frame (a third cheaper than a method).
    return property(attrgetter(slot), assign, doc=doc)


class Prompt:
    """One named section of a prompt. `source` is the plugin id (or "core") that added it.

    Content is plain text: nothing in it is evaluated or expanded, so a prompt built from user data cannot run code.
    In a request's `user_prompt`, `persist=False` marks a part that goes to the model for this request only and is
    not written to the session's history (KiraAI's meaning); `end` is what follows the content when the parts are
    joined. Built, compared and shown as the dataclass it was: `Prompt(content, name, source, metadata, persist,
    end)`, each by keyword too. Assigning `content`, `name`, `source`, `persist` or `end` moves `PROMPT_EDITS`
    (building one does not).
    """

    __slots__ = ("_content", "_name", "_source", "metadata", "_persist", "_end")
    __match_args__ = ("content", "name", "source", "metadata", "persist", "end")

    if TYPE_CHECKING:  # what the properties below read and take
        content: str
        name: str
        source: str
        persist: bool
        end: str
    else:
        content = _watched("_content", "The text of the section.")
        name = _watched("_name", "The section's name (`role`, `memory`, ...), by which a plugin finds it.")
        source = _watched("_source", 'The plugin id (or "core") that added the section.')
        persist = _watched("_persist", "False: a user prompt part sent for this request only, not kept in history.")
        end = _watched("_end", "What follows the content when the parts are joined.")

    def __init__(
        self,
        content: str = "",
        name: str = "",
        source: str = "",
        metadata: dict[str, Any] | None = None,
        persist: bool = True,
        end: str = "\n",
    ) -> None:
        # The slots themselves: building a section (a dozen a turn) costs what it did as a dataclass.
        self._content = content
        self._name = name
        self._source = source
        self.metadata: dict[str, Any] = {} if metadata is None else metadata
        self._persist = persist
        self._end = end

    def to_string(self) -> str:
        """The content followed by `end`, as KiraAI joins prompts."""
        return self.content + (self.end or "")

    def __str__(self) -> str:
        return self.content

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(content={self._content!r}, name={self._name!r}, source={self._source!r}, "
            f"metadata={self.metadata!r}, persist={self._persist!r}, end={self._end!r})"
        )

    def __eq__(self, other: object) -> bool:  # and so no `__hash__`: mutable, like the dataclass it was
        if type(other) is not type(self) or not isinstance(other, Prompt):  # the second for the checker
            return NotImplemented
        return (self._content, self._name, self._source, self.metadata, self._persist, self._end) == (
            other._content,
            other._name,
            other._source,
            other.metadata,
            other._persist,
            other._end,
        )


#: `(name, source, content)` of a `Prompt`, read at once from its slots: what a trace records of a system prompt section.
section_fields: Callable[[Prompt], tuple[str, str, str]] = attrgetter("_name", "_source", "_content")
#: `(content, end, persist)` of a `Prompt`, read at once from its slots: what a trace records of a user prompt part.
part_fields: Callable[[Prompt], tuple[str, str, bool]] = attrgetter("_content", "_end", "_persist")


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
    return [Prompt(sections.get(name, ""), name, "core") for name in DEFAULT_SECTIONS]


def render_system_prompt(prompts: list[Prompt]) -> str:
    """Join the non-empty sections, in list order, into the system message the model receives."""
    return "\n\n".join(p.content.strip() for p in prompts if p.content and p.content.strip())
