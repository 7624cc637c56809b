"""What a plugin is: the `PluginContext` the framework hands it, and the `BasePlugin` class."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

from core.chat import KiraCustomEvent
from core.plugin._events import custom_event_name
from core.plugin._host import PluginManagerView
from core.plugin._kira import KiraContextMixin, PluginConfig
from core.plugin._source import Manifest
from core.services import (
    PluginContextServicesMixin,
    PluginHost,
    PluginLogger,
    PluginServices,
    PluginServicesMixin,
    get_plugin_logger,
)
from core.tag import MediaPolicy
from core.utils.tasks import SHUTDOWN_GRACE, TaskOwner, must_propagate

__all__ = ["PluginContext", "BasePlugin"]


class PluginContext(PluginContextServicesMixin, KiraContextMixin):
    """Everything the framework gives one plugin: its id, logger, config, directories and owned background tasks.

    `config` is the plugin's settings; for plugins written for KiraAI it also answers the application's config in
    KiraAI's shape (`ctx.config["bot_config"]...`), and KiraAI's managers and context methods are here too
    (`ctx.adapter_mgr`, `ctx.get_llm_client()`, ...: see docs/kira-compat.md).

    Tasks started with `spawn()` belong to the plugin: they are cancelled when it is disabled, unloaded or reloaded.
    """

    def __init__(
        self,
        plugin_id: str,
        *,
        manifest: Manifest | None = None,
        plugin_dir: Path | None = None,
        data_dir: Path | None = None,
        config: dict[str, Any] | None = None,
        manager: PluginManagerView | None = None,
    ) -> None:
        self.plugin_id = plugin_id
        self.manifest = manifest or Manifest(plugin_id=plugin_id)
        self.plugin_dir = plugin_dir
        self.data_dir = data_dir or Path("data") / "plugin_data" / plugin_id
        self.manager = manager
        kira = manager.kira if manager is not None else None
        self.config: PluginConfig = PluginConfig(config or {}, kira.config if kira is not None else None, plugin_id)
        self.logger: PluginLogger = get_plugin_logger(plugin_id)
        self.services: PluginServices | None = None  # made on first use by core.services
        self.bound = False  # set once the loader acted on the plugin's declarations
        self._tasks = TaskOwner(f"plugin {plugin_id!r}", logger=self.logger)
        self._cleanups: list[Callable[[], Awaitable[None] | None]] = []

    @property
    def app(self) -> PluginHost | None:
        """The running application as plugins may use it (send, buffers, turns, history), or None outside one."""
        return self.manager.app if self.manager is not None else None

    @property
    def metadata(self) -> dict[str, Any]:
        """The manifest as a dict."""
        return self.manifest.model_dump()

    def get_plugin_data_dir(self) -> Path:
        """This plugin's own data directory, created if missing (the KiraAI name for `data_dir`)."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        return self.data_dir

    @property
    def allowed_media_roots(self) -> list[Path]:
        """Directories whose files output tags such as `<file>` and `<img>` may send (operator-configured)."""
        return list(self.manager.media_roots) if self.manager is not None else []

    @property
    def media_policy(self) -> MediaPolicy:
        """The operator's consent for model-steered tags: whether `<at id="all"/>` may mention everyone, and which
        URLs `<img>`, `<record>`, `<video>` and `<file>` may hand to the platform (`[media]`)."""
        return self.manager.media_policy if self.manager is not None else MediaPolicy()

    @property
    def private_paths(self) -> list[Path]:
        """hookchat's own files (the data directory with history and plugin stores, the config file): no output
        tag ever sends them, whatever the media directories say."""
        return list(self.manager.private_paths) if self.manager is not None else [self.data_dir]

    async def dispatch_custom(self, event_name: str, data: Any = None) -> KiraCustomEvent:
        """Dispatch the custom event `event_name` to every `@on.custom_event(event_name=...)` hook; returns it."""
        event = KiraCustomEvent(event_name, data)
        if self.manager is not None:
            await self.manager.engine.dispatch(custom_event_name(event_name), event)
        return event

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Run `coro` as a background task owned by this plugin; a failure is logged with the plugin id.

        Refused (RuntimeError) once the plugin is stopping: such a task would outlive its owner.
        """
        return self._tasks.spawn(coro, name=name)

    def on_stop(self, cleanup: Callable[[], Awaitable[None] | None]) -> None:
        """Call `cleanup` when the plugin stops (after `terminate()`), newest first."""
        self._cleanups.append(cleanup)

    @property
    def closing(self) -> bool:
        """True once the plugin started stopping: its services then refuse new registrations and tasks."""
        return self._tasks.closing

    @closing.setter
    def closing(self, value: bool) -> None:
        self._tasks.closing = value

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The plugin's background tasks still running."""
        return self._tasks.tasks

    async def close(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Cancel and await every owned task (one that ignores its cancellation for `grace` seconds is abandoned),
        then run the `on_stop` cleanups (each failure logged, `SystemExit` included)."""
        await self._tasks.aclose(grace)
        while self._cleanups:
            cleanup = self._cleanups.pop()
            try:
                result = cleanup()
                if asyncio.iscoroutine(result) or isinstance(result, Awaitable):
                    await result
            except BaseException as exc:
                if must_propagate(exc):
                    raise
                self.logger.error("cleanup of plugin %r failed", self.plugin_id, exc_info=exc)

    def __repr__(self) -> str:
        return f"PluginContext({self.plugin_id!r})"


class BasePlugin(PluginServicesMixin):
    """Base class of a plugin: `__init__(ctx, cfg)`, then `await initialize()`; `await terminate()` when it stops.

    `cfg` is the plugin's validated configuration (defaults from `schema.json`, overridden by the operator).
    Hooks (`@on.<event>()`), tools (`@register.tool`) and tags (`@register.tag`) are methods of the subclass.
    The plugin services of seeds 000/002 (`register_llm_tool`, `config`, `store`, `db`, `push_message`, ...) come
    from `PluginServicesMixin`; see docs/sdk.md.
    """

    def __init__(self, ctx: PluginContext, cfg: dict[str, Any] | None = None) -> None:
        self.ctx = ctx
        self.cfg: dict[str, Any] = cfg if cfg is not None else {}
        self.plugin_cfg = self.cfg  # the name KiraAI plugins read it under

    @property
    def plugin_id(self) -> str:
        """This plugin's id (from its manifest)."""
        return self.ctx.plugin_id

    @property
    def logger(self) -> PluginLogger:
        """This plugin's logger (`hookchat.plugin.<plugin_id>`)."""
        return self.ctx.logger

    async def initialize(self) -> None:
        """Called once after construction, before any hook runs. Raise to refuse to load (the reason is shown)."""

    async def terminate(self) -> None:
        """Called when the plugin is disabled, unloaded or reloaded, and at shutdown."""
