"""Platform adapters: what a chat platform implements to deliver messages to the bot and send its answers.

Built-in types: `console` (`core.adapter.console`), `onebot` (`core.adapter.onebot`, QQ through OneBot v11),
`telegram`, `discord` and `matrix` (their libraries are the extras `hookchat[telegram]`, `hookchat[discord]`,
`hookchat[matrix]`); installed packages add more through the `hookchat.adapters` entry point group. The contract, for authors of
adapters, is docs/adapters.md.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import importlib
import importlib.metadata
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Protocol

from pydantic import ValidationError

from core.chat import KiraEvent, KiraIMMessage, KiraIMSentResult, MessageChain, Received, Session, TurnResult
from core.config import HookchatConfig

__all__ = [
    "Adapter",
    "AdapterHost",
    "ALL_ELEMENTS",
    "AdapterError",
    "adapter_class",
    "build_adapters",
    "ADAPTER_ENTRY_POINT_GROUP",
    "options_error",
    "require_library",
]

#: Element type names an adapter may support; the built-in tags offered to the model follow this set.
ALL_ELEMENTS = frozenset(
    {"text", "image", "at", "reply", "forward", "emoji", "sticker", "record", "notice", "poke", "json", "file", "video"}
)


class AdapterError(RuntimeError):
    """An adapter could not send a message."""


def options_error(
    adapter_name: str,
    adapter_type: str,
    exc: ValidationError,
    docs: str,
    reasons: Mapping[tuple[str, str], str] | None = None,
) -> str:
    """The refusal of an instance's `options`: one line per problem, naming the adapter and the option, pointing
    unknown and missing options to `docs` (a page and section). `reasons` words an error type of one option
    (`{(".user_id", "string_pattern_mismatch"): "not a Matrix user id"}`) better than pydantic does."""
    lines = []
    for e in exc.errors(include_url=False, include_input=False):
        where = "".join(f".{p}" for p in e["loc"])
        reason = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            reason = f"unknown option (see {docs})"
        elif e["type"] == "missing":
            reason = f"required (see {docs})"
        reason = (reasons or {}).get((where, e["type"]), reason)
        lines.append(f"adapter {adapter_name!r} ({adapter_type}): options{where}: {reason}")
    return "\n".join(lines)


def require_library(module: str, adapter_type: str, package: str) -> ModuleType:
    """`module` imported, for an adapter type whose library is the optional extra `hookchat[<adapter_type>]`; when
    it is not installed, `AdapterError` names the package and the command that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise AdapterError(
            f"the {adapter_type} adapter needs {package}, which is not installed ({exc}): "
            f"pip install 'hookchat[{adapter_type}]'"
        ) from None


class AdapterHost(Protocol):
    """What an adapter may use of the app: deliver an incoming message (`receive`), or deliver it and wait for the
    turn it causes (`respond`, for adapters where one message ends with Enter, like the console)."""

    async def receive(self, message: KiraIMMessage) -> Received:
        """Run an incoming message through the pipeline; returns what became of it."""
        ...

    async def respond(self, message: KiraIMMessage) -> TurnResult | None:
        """Deliver a message, flush its session at once, and wait for the turn; None when no turn follows."""

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Turn the session's buffered messages into a batch now (Enter in a terminal); None when none are."""

    def cancel_turn(self, session: Session | str) -> bool:
        """Stop the turn running for `session` (a stop button, Ctrl-C); False when none is running."""
        ...


class Adapter(abc.ABC):
    """A chat platform connection. Incoming messages go to `self.app.receive(KiraIMMessage(...))`; outgoing ones
    come through `send`. `capabilities` names the element types the platform can send."""

    name: str = "adapter"
    capabilities: frozenset[str] = ALL_ELEMENTS
    #: True when the platform can show a message while the model writes it: `draft()` is then called as it grows.
    drafts: bool = False

    def __init__(self, name: str | None = None, **options: Any) -> None:
        if name:
            self.name = name
        self.options = options
        self.app: AdapterHost | None = None

    async def start(self, app: AdapterHost) -> None:
        """Connect; called by the app with itself once plugins are loaded."""
        self.app = app

    async def stop(self) -> None:  # noqa: B027 - optional: an adapter with nothing to close inherits the no-op
        """Disconnect."""

    async def draft(self, session: Session, text: str) -> None:  # noqa: B027 - optional, for adapters with drafts
        """The visible text of the message the model is writing, so far (only when `drafts` is True); the
        finished message still comes through `send`."""

    def typing(self, session: Session) -> contextlib.AbstractAsyncContextManager[None]:
        """Held while the model writes an answer for `session` (around each model call of a turn), so a platform
        with a typing indicator can show it meanwhile; it must never raise into the turn. The default shows
        nothing."""
        return contextlib.nullcontext()

    async def send_in_turn(self, session: Session, chain: MessageChain, event: KiraEvent | None) -> KiraIMSentResult:
        """Send one message as the app's send path does: `event` is the turn (or push) it belongs to, or None.
        Adapters that need to know the turn override this (a cluster worker's remote adapter numbers a turn's
        replies so a redone turn does not send them twice); the default is `send`."""
        return await self.send(session, chain)

    @abc.abstractmethod
    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Send one message to `session`; return what happened (never raise for a platform refusal)."""


#: Entry point group through which installed packages provide adapter types (`name = "pkg.module:AdapterClass"`).
ADAPTER_ENTRY_POINT_GROUP = "hookchat.adapters"
_BUILTIN_TYPES = {
    "console": "core.adapter.console:ConsoleAdapter",
    "onebot": "core.adapter.onebot:OneBotAdapter",
    "telegram": "core.adapter.telegram:TelegramAdapter",
    "discord": "core.adapter.discord:DiscordAdapter",
    "matrix": "core.adapter.matrix:MatrixAdapter",
}
#: The library (module, package) of each built-in type that needs an optional extra, `hookchat[<type>]`.
_EXTRAS = {"telegram": ("aiogram", "aiogram"), "discord": ("discord", "discord.py"), "matrix": ("nio", "matrix-nio")}


def adapter_class(type_name: str) -> type[Adapter]:
    """The adapter class of `type_name`: a built-in type or one an installed package exposes as an entry point."""
    target = _BUILTIN_TYPES.get(type_name)
    if target is None:
        found = [ep for ep in importlib.metadata.entry_points(group=ADAPTER_ENTRY_POINT_GROUP) if ep.name == type_name]
        if not found:
            known = sorted(
                {*_BUILTIN_TYPES, *(ep.name for ep in importlib.metadata.entry_points(group=ADAPTER_ENTRY_POINT_GROUP))}
            )
            raise AdapterError(f"unknown adapter type {type_name!r}; known types: {', '.join(known)}")
        return found[0].load()
    if type_name in _EXTRAS:
        library, package = _EXTRAS[type_name]
        require_library(library, type_name, package)
    module, _, name = target.partition(":")
    return getattr(importlib.import_module(module), name)


def build_adapters(config: HookchatConfig) -> list[Adapter]:
    """The adapters `[adapters]` of a `HookchatConfig` asks for: the console (if on) and every enabled instance."""
    adapters: list[Adapter] = []
    if config.adapters.console:
        adapters.append(adapter_class("console")())
    for instance in config.adapters.instances:
        if instance.enabled:
            adapters.append(adapter_class(instance.type)(instance.adapter_name, **instance.options))
    return adapters
