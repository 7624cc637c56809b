"""Output tags: `BaseTag`, the `FunctionTag` that wraps `@register.tag` methods, and `TagSet`, the tags one
request offers the model. A tag turns `<name attr="...">value</name>` in the model's output into message elements."""

from __future__ import annotations

import inspect
import itertools
import logging
import re
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextvars import ContextVar
from typing import Any

import anyio

from core.chat import BaseMessageElement

__all__ = [
    "BaseTag",
    "FunctionTag",
    "TagSet",
    "TagDefinitionError",
    "validate_tag_name",
    "current_event",
    "RESERVED_TAG_NAMES",
    "TagTimeout",
    "DEFAULT_TAG_TIMEOUT",
]

#: Tag names: an ASCII letter or `_`, then letters, digits, `_ . : -`; matched case-insensitively.
TAG_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.:\-]{0,63}")

#: Names the parser itself gives meaning to: a plugin cannot register them.
RESERVED_TAG_NAMES = frozenset({"msg", "think", "reasoning"})

_log = logging.getLogger("hookchat.tag")

_current_event: ContextVar[Any] = ContextVar("hookchat_tag_event", default=None)

#: Seconds one occurrence's handler may run before it is abandoned and the occurrence sent as its text.
DEFAULT_TAG_TIMEOUT = 10.0


class TagTimeout(TimeoutError):
    """A tag handler ran past the tag's `timeout`; the occurrence degrades to its text, like a handler that raised."""


def current_event() -> Any:
    """The event whose output is being parsed, inside a tag handler (None outside one, or when none was given).

    Handlers receive only `value` and the tag's attributes; this is how one reaches the turn's event, e.g.
    `getattr(current_event(), "tool_attachments", [])`.
    """
    return _current_event.get()


class TagDefinitionError(ValueError):
    """A tag breaks the rules (bad or reserved name, not a tag); the message says which rule and how to fix it."""


def validate_tag_name(name: Any, *, where: str = "") -> str:
    """Check a tag name (a letter or `_`, then up to 63 of `A-Z a-z 0-9 _ . : -`, not reserved); returns it.

    Raises `TagDefinitionError` naming the tag and `where` it came from.
    """
    origin = f" ({where})" if where else ""
    if not isinstance(name, str) or not TAG_NAME_RE.fullmatch(name):
        raise TagDefinitionError(
            f"tag name {name!r}{origin} is invalid: start with a letter or '_', then up to 63 of A-Z a-z 0-9 _ . : -"
        )
    if name.lower() in RESERVED_TAG_NAMES:
        raise TagDefinitionError(f"tag name {name!r}{origin} is reserved by the output parser; pick another name")
    return name


class BaseTag:
    """A tag as a class: set `name` and `description`, implement `async handle(value, **attrs)`.

    Add it to one request with `tag_set.register(MyTag(ctx=self.ctx))` in an `llm_request` hook. `description` is
    the line of the system prompt that teaches the model the tag. With `root = True` the tag may also stand
    outside `<msg>` as an action of its own; the elements it returns there are sent as a message of their own.
    """

    name: str = ""
    description: str = ""
    root: bool = False
    #: KiraAI's way to say `root`: `parent = None` makes a root tag.
    parent: str | None = "msg"
    #: Seconds one call of `handle` may take; past it the call is cancelled and reported like a raise.
    timeout: float = DEFAULT_TAG_TIMEOUT

    def __init__(self, ctx: Any = None, **kwargs: Any) -> None:
        self.ctx = ctx
        self.kwargs = kwargs  # KiraAI keeps the keywords there as well
        for key, value in kwargs.items():
            setattr(self, key, value)
        if self.parent is None:
            self.root = True
        validate_tag_name(self.name, where=type(self).__qualname__)

    @property
    def owner(self) -> str | None:
        """The plugin id this tag belongs to, if it came from a plugin."""
        return getattr(self.ctx, "plugin_id", None)

    async def handle(self, value: str, **kwargs: Any) -> list[BaseMessageElement]:
        """Turn one occurrence of the tag into message elements.

        `value` is the tag's inner text (character references decoded); `kwargs` are its attributes, names
        lower-cased. Raising is allowed: the occurrence then degrades to its `value` as plain text.
        """
        raise NotImplementedError(f"tag {self.name!r} does not implement handle()")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTag(BaseTag):
    """A tag backed by a function: the `@register.tag` methods of plugins, `(value, **attrs)` once bound.

    Sync handlers run in a worker thread so they cannot block the event loop.
    """

    def __init__(
        self,
        name: str,
        description: str,
        handler: Callable[..., Awaitable[Any] | Any],
        ctx: Any = None,
        *,
        root: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.handler = handler
        self.root = root
        if inspect.iscoroutinefunction(handler):
            self.handle = handler  # one coroutine less per tag on the hot path
        super().__init__(ctx=ctx)

    async def handle(self, value: str, **kwargs: Any) -> list[BaseMessageElement]:
        """Run a sync handler in a worker thread (an async handler replaces this method on the instance); at the
        deadline the thread is abandoned (it runs on until the handler returns) and the leak logged."""
        try:
            result = await anyio.to_thread.run_sync(lambda: self.handler(value, **kwargs), abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            _log.warning(
                "tag <%s> (plugin %r): abandoned; its synchronous handler still runs in a worker thread "
                "until it returns",
                self.name,
                self.owner,
            )
            raise
        if inspect.isawaitable(result):
            result = await result
        return result


#: The numbers `TagSet.version` takes: each change of any set takes the next one.
_versions = itertools.count(1)


class TagSet:
    """The tags offered to the model in one request: register, unregister, get, `in`, iterate, and `to_prompt()`.

    Names are matched case-insensitively. Registering a name again replaces the earlier tag, so a per-request tag
    overrides a global one. `version` is a number that changes whenever the set changes (`register`,
    `unregister`), and no two sets share one: while it stays, the set is as it was (what a trace compares after
    each `llm_request` hook).
    """

    def __init__(self, tags: Iterable[BaseTag | type[BaseTag]] = ()) -> None:
        self._tags: dict[str, BaseTag] = {}
        self.version = next(_versions)
        for tag in tags:
            self.register(tag)

    def register(self, tag: BaseTag | type[BaseTag], *more: BaseTag | type[BaseTag]) -> BaseTag:
        """Add a tag instance, or a `BaseTag` subclass (instantiated without ctx); returns the instance.

        Several tags may be given at once, as KiraAI allows (`register(a, b)`); the first one's instance is returned.
        """
        if more:
            first = self.register(tag)
            for extra in more:
                self.register(extra)
            return first
        if isinstance(tag, type):
            if not issubclass(tag, BaseTag):
                raise TagDefinitionError(f"{tag!r} is not a BaseTag subclass")
            tag = tag()
        if not isinstance(tag, BaseTag):
            raise TagDefinitionError(f"{tag!r} is not a BaseTag instance; subclass core.tag.BaseTag")
        self._tags[validate_tag_name(tag.name, where=type(tag).__qualname__).lower()] = tag
        self.version = next(_versions)
        return tag

    def unregister(self, name: str) -> BaseTag | None:
        """Remove the tag called `name`; returns it, or None when there was none."""
        self.version = next(_versions)
        return self._tags.pop(name.lower(), None)

    def get(self, name: str) -> BaseTag | None:
        """The tag called `name` (any letter case), or None."""
        return self._tags.get(name.lower())

    def get_all(self) -> list[BaseTag]:
        """Every tag that may be written inside a `<msg>` block (all of them, root tags included), in order.

        KiraAI's `get_all()` leaves its root tags out, because they cannot appear inside `<msg>` there; here a root
        tag works in both places, so it is listed in both.
        """
        return list(self._tags.values())

    def get_all_root(self) -> list[BaseTag]:
        """The tags that may also stand alone outside `<msg>` (`root = True`), in order."""
        return [t for t in self._tags.values() if t.root]

    def names(self) -> list[str]:
        """The registered names (lower-cased), in registration order."""
        return list(self._tags)

    def copy(self) -> TagSet:
        """A shallow copy (the same tag objects), e.g. the global set copied for one request."""
        out = TagSet()
        out._tags = dict(self._tags)  # a new set: `version` is its own already
        return out

    def to_prompt(self) -> str:
        """The text that teaches the model the output protocol: `<msg>` blocks and one line per tag.

        The agent loop puts it into the system prompt section named "format".
        """
        lines = [
            "Write your reply as one or more <msg>...</msg> blocks. Each block is sent to the chat as one "
            "separate message, in order.",
        ]
        inner = [t for t in self._tags.values() if not t.root]
        roots = [t for t in self._tags.values() if t.root]
        if inner or roots:
            lines.append("Inside a block, write plain text and use these tags where they fit:")
            lines.extend(_prompt_line(t) for t in inner + roots)
        if roots:
            names = ", ".join(f"<{t.name}>" for t in roots)
            lines.append(f"{names} may also stand alone outside a <msg> block.")
        lines.append("Example: <msg>Hello!</msg><msg>A second message.</msg>")
        lines.append('You need not escape "&" or "<" in text (&amp; and &lt; are understood as well).')
        return "\n".join(lines)

    def __contains__(self, item: object) -> bool:
        if isinstance(item, BaseTag):
            return self._tags.get(item.name.lower()) is item
        return isinstance(item, str) and item.lower() in self._tags

    def __iter__(self) -> Iterator[BaseTag]:
        return iter(list(self._tags.values()))

    def __len__(self) -> int:
        return len(self._tags)

    def __bool__(self) -> bool:
        return bool(self._tags)

    def __repr__(self) -> str:
        return f"TagSet({list(self._tags)})"


def _prompt_line(tag: BaseTag) -> str:
    description = " ".join(str(tag.description).split())
    return f"- <{tag.name}>: {description}" if description else f"- <{tag.name}>"
