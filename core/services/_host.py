"""The seams of the services: what they may use of a plugin's context (`PluginHandle`), of the plugin loader
(`PluginDirectory`) and of the running app (`PluginHost`). `core.plugin` and `core.app` implement them; the
services never reach further into either."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, NotRequired, Protocol, TypedDict

from core.chat import (
    KiraEvent,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    MessageChain,
    Session,
    SessionBuffers,
    TurnResult,
)
from core.config import HookchatConfig
from core.services._store import PluginStoreLike
from core.utils.clock import Clock
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import BaseTool

__all__ = ["PushReceipt", "PushSubmitter", "PluginHost", "PluginHandle", "PluginDirectory", "PluginStatusView"]


class PushReceipt(TypedDict):
    """What `push_message` returns at once: `submitted` (and `ok`) True when the local submission path accepted
    the message, with its `id` and `session`; else False with one of `PUSH_REASONS` as `reason`."""

    submitted: bool
    ok: bool
    reason: NotRequired[str]
    id: NotRequired[str]
    session: NotRequired[str]


class PushSubmitter(Protocol):
    """What the services use of the app's proactive-message service (`core.services._push.PushService`)."""

    def submit(self, plugin_id: str, **kwargs: Any) -> PushReceipt:
        """Queue a proactive message of `plugin_id`; returns the receipt at once."""
        ...


class PluginHost(Protocol):
    """What plugins and services may use of the running app: sending, the session buffers, turns and history."""

    config: HookchatConfig
    clock: Clock

    @property
    def buffers(self) -> SessionBuffers:
        """The per-session buffers of the `buffer` strategy."""
        ...

    @property
    def push(self) -> PushSubmitter | None:
        """The proactive-message service, or None when the app runs without one."""
        ...

    def serves(self, session: Session) -> bool:
        """Whether an adapter of this app serves `session`."""
        ...

    def capabilities(self, session: Session) -> frozenset[str]:
        """The element types the session's adapter can send."""
        ...

    async def send(self, session: Session, chain: MessageChain, event: KiraEvent | None = None) -> KiraIMSentResult:
        """Send `chain` to `session` (the one send path: `message_sent` hooks and signal fire there)."""
        ...

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Turn everything buffered for `session` into one batch now; None when nothing is buffered."""

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        """Queue a batch as a turn of its session, like any batch the pipeline makes."""
        ...

    def cancel_turn(self, session: Session | str) -> bool:
        """Cancel the turn running for `session`; False when none is running."""
        ...

    async def reset(self, session: Session | str) -> int:
        """Forget the session's history and buffered messages; returns the number of stored turns deleted."""
        ...

    @property
    def has_history(self) -> bool:
        """Whether the app keeps history (so a note can be remembered)."""
        ...

    async def remember(self, session: Session, text: str, meta: dict[str, Any]) -> None:
        """Append `text` to the session's history as a user message the model reads next turn."""

    def shared_store(self, plugin_id: str) -> PluginStoreLike | None:
        """The plugin's store when the app keeps stores outside the process (a cluster worker); None: SQLite."""

    @property
    def tool_server_running(self) -> bool:
        """Whether the app serves the HTTP tool registry right now."""
        ...

    async def clear_remote_tools(self, source: str) -> bool:
        """Remove the remote tools registered with `source` from the app's tool registry; False without one."""
        ...


class PluginStatusView(Protocol):
    """The part of a plugin's status the services read."""

    @property
    def plugin_id(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def reason(self) -> str | None: ...


class PluginDirectory(Protocol):
    """What the services may use of the plugin loader: the loaded plugins and the tool registry."""

    tools: OwnedRegistry[BaseTool]

    def get_plugin(self, plugin_id: str) -> Any:
        """The loaded plugin instance, or None (plugins are any class: their type is theirs)."""

    def loaded_ids(self) -> list[str]:
        """The ids of loaded plugins."""
        ...

    def status(self, plugin_id: str) -> PluginStatusView | None:
        """One plugin's status, or None when unknown."""

    def statuses(self) -> list[Any]:
        """Every known plugin's status."""
        ...


class PluginHandle(Protocol):
    """What the services may use of one plugin's context (`core.plugin.PluginContext` implements it)."""

    plugin_id: str
    data_dir: Path
    plugin_dir: Path | None
    bound: bool

    @property
    def closing(self) -> bool:
        """True once the plugin started stopping: services then refuse new registrations."""
        ...

    @property
    def config(self) -> dict[str, Any]:
        """The plugin's settings (read; changed in place by the config service)."""
        ...

    @property
    def app(self) -> PluginHost | None:
        """The running app, or None outside one."""

    @property
    def manager(self) -> PluginDirectory | None:
        """The loader that loaded the plugin, or None for a bare context."""

    @property
    def metadata(self) -> dict[str, Any]:
        """The plugin's manifest as a dict."""
        ...

    def on_stop(self, cleanup: Callable[[], Awaitable[None] | None]) -> None:
        """Call `cleanup` when the plugin stops."""

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Run `coro` as a task owned by the plugin."""
        ...
