"""The services of one plugin, created on first use and closed when the plugin stops: config, store, database,
entries, timers, cross-plugin calls and proactive messages; and `bind_plugin`, which acts on a plugin's declarations.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from core.services._config import PluginConfig
from core.services._db import PluginDatabase
from core.services._declarations import ENTRY_ATTR, ENTRY_HOOK_ATTR, LLM_TOOL_ATTR, TIMER_ATTR, LlmToolMeta, declared
from core.services._entries import EntryRegistry, TimerRunner
from core.services._host import PluginHandle
from core.services._plugins import Plugins
from core.services._push import PushReceipt, PushService
from core.services._result import SdkError
from core.services._store import PluginStore, PluginStoreLike
from core.services._tools import add_function_tool, remote_owner
from core.utils.log import PluginLogger, get_plugin_logger

__all__ = ["PluginServices", "ServicedHandle", "services_for", "bind_plugin", "storage_dir_of", "clear_remote_tools"]

_UNAVAILABLE = PushService(None)  # never started, so it only validates and answers `transport_unavailable`


def storage_dir_of(ctx: PluginHandle) -> Path:
    """The plugin's storage root: its framework data directory, `<data>/plugin_data/<plugin_id>`."""
    return Path(ctx.data_dir)


class PluginServices:
    """Everything seed 002 gives a plugin beyond hooks, for the plugin of `ctx`. Each part is created on first use;
    `aclose()` (registered with `ctx.on_stop`) stops timers, forgets entries and closes the store and database."""

    def __init__(self, ctx: PluginHandle, instance: object = None) -> None:
        self.ctx = ctx
        self.instance = instance
        self.plugin_id: str = ctx.plugin_id
        self.logger: PluginLogger = get_plugin_logger(self.plugin_id)
        self.storage_dir = storage_dir_of(ctx)
        self.entries = EntryRegistry(self.plugin_id, self.logger, ctx)
        self.timers = TimerRunner(ctx, self.logger)
        self.plugins = Plugins(ctx, lambda other: services_for(other.ctx, other).entries)
        self._config: PluginConfig | None = None
        self._store: PluginStoreLike | None = None
        self._db: PluginDatabase | None = None
        self._closed = False
        self._made_dirs: set[str] = set()
        if instance is not None:
            self.entries.collect(instance)

    # -- paths -----------------------------------------------------------------------------------------------------

    @property
    def runtime_config_path(self) -> Path:
        """Where config updates are saved: `<storage>/runtime_config.json`."""
        return self.storage_dir / "runtime_config.json"

    def data_path(self, *parts: str) -> Path:
        """`<storage>/data/<parts...>`; the `data` directory is created, the path itself is not."""
        return self._under("data", parts)

    def cache_path(self, *parts: str) -> Path:
        """`<storage>/cache/<parts...>` (disposable files); the `cache` directory is created."""
        return self._under("cache", parts)

    def _under(self, kind: str, parts: tuple[str, ...]) -> Path:
        base = Path(os.path.normpath(self.storage_dir / kind))
        path = Path(os.path.normpath(base.joinpath(*parts)))
        if path != base and base not in path.parents:
            raise SdkError(f"{kind}_path{parts!r} leaves the plugin's {kind} directory", code="invalid_argument")
        if kind not in self._made_dirs:
            # Seed 002's data_path()/cache_path() are synchronous, so the directory is made here, on the loop:
            # once per directory and plugin run, never on every call.
            base.mkdir(parents=True, exist_ok=True)
            self._made_dirs.add(kind)
        return path

    # -- lazily created parts ---------------------------------------------------------------------------------------

    def _check_open(self, what: str) -> None:
        if self._closed:
            raise SdkError(f"plugin {self.plugin_id!r} stopped: its {what} is closed", code="storage_closed")

    @property
    def config(self) -> PluginConfig:
        """The plugin's `PluginConfig`."""
        if self._config is None:
            self._config = PluginConfig(self.ctx, self.runtime_config_path, on_change=self._config_changed)
        return self._config

    @property
    def store(self) -> PluginStoreLike:
        """The plugin's store: a `PluginStore` (`<storage>/store.sqlite3`), or the app's shared one when the app
        keeps stores outside the process (a cluster worker: every worker reads the same values)."""
        if self._store is None:
            self._check_open("store")
            app = self.ctx.app
            shared = app.shared_store(self.plugin_id) if app is not None else None
            self._store = shared or PluginStore(self.storage_dir / "store.sqlite3", plugin_id=self.plugin_id)
        return self._store

    @property
    def db(self) -> PluginDatabase:
        """The plugin's `PluginDatabase` (`<storage>/database.sqlite3`)."""
        if self._db is None:
            self._check_open("database")
            self._db = PluginDatabase(self.storage_dir / "database.sqlite3", plugin_id=self.plugin_id)
        return self._db

    async def _config_changed(self, config: dict[str, Any]) -> None:
        hook = getattr(self.instance, "_hookchat_config_changed", None)
        if hook is not None:
            await hook(config)

    # -- proactive messages ------------------------------------------------------------------------------------------

    def push_message(self, **kwargs: Any) -> PushReceipt:
        """Submit a proactive message (see `PushService`). `transport_unavailable` when the app has no push service
        or the plugin is stopping (`ctx.closing`): a stopping plugin must not leave messages behind it."""
        app = self.ctx.app
        service = app.push if app is not None else None
        if service is None or self.ctx.closing:
            service = _UNAVAILABLE  # never started: it validates the call, then rejects it as unavailable
        return service.submit(self.plugin_id, **kwargs)

    # -- stop ------------------------------------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop timers, forget entries, close the store and database. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.timers.clear()
        self.entries.clear()
        for part in (self._store, self._db):
            if part is not None:
                await part.close()


class ServicedHandle(PluginHandle, Protocol):
    """A plugin's context that keeps the plugin's services (`core.plugin.PluginContext` is one): `services_for`
    makes them on first use and keeps them here. (Declared here, not on `PluginHandle`, which the services' own
    modules are built on.)"""

    services: PluginServices | None


def services_for(ctx: ServicedHandle, instance: object = None) -> PluginServices:
    """The services of the plugin of `ctx`, created (and registered for closing on `ctx.on_stop`) on first use."""
    services = ctx.services
    if services is None:
        if instance is None and ctx.manager is not None:
            instance = ctx.manager.get_plugin(ctx.plugin_id)
        services = ctx.services = PluginServices(ctx, instance)
        ctx.on_stop(services.aclose)
    elif instance is not None and services.instance is None:
        services.instance = instance
        services.entries.collect(instance)
    return services


async def clear_remote_tools(ctx: PluginHandle) -> None:
    """Remove the remote tools registered with source `plugin:<plugin_id>`: from the running registry (memory and
    its database) when the app has one, else from the tool registry only."""
    source = f"plugin:{ctx.plugin_id}"
    app = ctx.app
    if app is not None and await app.clear_remote_tools(source):
        return
    if ctx.manager is not None:
        ctx.manager.tools.remove_owner(remote_owner(source))


def bind_plugin(instance: object, ctx: ServicedHandle) -> None:
    """Act on a plugin's declarations, once: register its `@register.tool` and `@llm_tool` tools (the same path as
    `register_llm_tool`), collect its `@plugin_entry` entries, start its `@timer_interval` timers, and arrange that
    its remote tools (source `plugin:<id>`) are cleared when it stops. Calling it again does nothing."""
    if ctx.bound:
        return
    ctx.bound = True
    for attr, fn in declared(instance, LLM_TOOL_ATTR):
        tool: LlmToolMeta = getattr(fn, LLM_TOOL_ATTR)
        add_function_tool(
            ctx,
            tool.name,
            tool.description,
            tool.parameters,
            getattr(instance, attr),
            timeout=tool.timeout,
            role=tool.role,
            pass_event=tool.pass_event,
        )
    if declared(instance, ENTRY_ATTR) or declared(instance, ENTRY_HOOK_ATTR) or declared(instance, TIMER_ATTR):
        services = services_for(ctx, instance)
        services.timers.collect(instance)
    ctx.on_stop(lambda: clear_remote_tools(ctx))
