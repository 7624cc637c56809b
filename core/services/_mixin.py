"""The services as plugin methods: `PluginServicesMixin` is a base of `BasePlugin` (so every plugin has them) and
`PluginContextServicesMixin` a base of `PluginContext`. Both only delegate to `core.services`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from core.services._declarations import EntryMeta
from core.services._push import PushReceipt
from core.services._services import PluginServices, ServicedHandle, services_for
from core.services._tools import add_function_tool, plugin_tools, remove_function_tool

__all__ = ["PluginServicesMixin", "PluginContextServicesMixin"]


class _Service:
    """A read-only attribute backed by the plugin's services. It is a non-data descriptor on purpose: a plugin that
    assigns an attribute of the same name (`self.config = ...`) keeps its own value."""

    def __init__(self, part: str | None, doc: str) -> None:
        self.part = part
        self.__doc__ = doc

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            return self
        services = services_for(instance.ctx, instance)
        return services if self.part is None else getattr(services, self.part)


class _Plugin(Protocol):
    """What the mixin's methods need of the plugin they are part of."""

    @property
    def ctx(self) -> ServicedHandle:
        """The plugin's context."""
        ...


def _svc(plugin: Any) -> PluginServices:
    return services_for(plugin.ctx, plugin)


class PluginServicesMixin:
    """Seed 002's plugin services on every plugin (the class needs `self.ctx`). See docs/sdk.md."""

    config = _Service("config", "The plugin's config: `await self.config.get_int('a.b', default=30)`, `update(...)`.")
    store = _Service("store", "The plugin's key-value store; every method returns `Ok`/`Err`.")
    db = _Service("db", "The plugin's SQLite database: `async with unwrap(await self.db.session()) as session:`.")
    plugins = _Service("plugins", "Calls into other plugins: `await self.plugins.call_entry('pid:entry', {...})`.")

    services = _Service(None, "All of this plugin's services in one `PluginServices` object.")

    # -- tools -----------------------------------------------------------------------------------------------------

    def register_llm_tool(
        self: _Plugin,
        name: str,
        description: str,
        parameters: dict[str, Any] | None,
        handler: Callable[..., Any],
        timeout: float = 30.0,
        role: str | None = None,
    ) -> bool:
        """Register a tool the model can call: `handler(**arguments)`, async or sync (run in a thread).

        The same rules and the same registration path as `@llm_tool` and `@register.tool`: the name matches
        `[A-Za-z0-9_.\\-]{1,64}`, the timeout is at most 300 s, `role` None is global. Registering a name again
        replaces this plugin's earlier tool. Returns True; breaking a rule raises `ToolDefinitionError`.
        """
        add_function_tool(
            self.ctx, name, description, parameters, handler, timeout=timeout, role=role, pass_event=False
        )
        return True

    def unregister_llm_tool(self: _Plugin, name: str) -> bool:
        """Remove this plugin's tool `name`; False when it has none (other plugins' tools are never touched)."""
        return remove_function_tool(self.ctx, name)

    def list_llm_tools(self: _Plugin) -> list[dict[str, Any]]:
        """This plugin's tools: name, description, parameters, timeout, role, owner, remote, active."""
        return plugin_tools(self.ctx)

    # -- files -----------------------------------------------------------------------------------------------------

    def data_path(self, *parts: str) -> Path:
        """A path under the plugin's persistent `data/` directory (`<data>/plugin_data/<plugin_id>/data/...`)."""
        return _svc(self).data_path(*parts)

    def cache_path(self, *parts: str) -> Path:
        """A path under the plugin's disposable `cache/` directory (`<data>/plugin_data/<plugin_id>/cache/...`)."""
        return _svc(self).cache_path(*parts)

    # -- entries ---------------------------------------------------------------------------------------------------

    def register_dynamic_entry(
        self,
        entry_id: str,
        handler: Callable[..., Any],
        name: str | None = None,
        description: str = "",
        *,
        input_schema: dict[str, Any] | None = None,
        kind: str = "action",
        timeout: float | None = None,
        llm_result_fields: list[str] | None = None,
        enabled: bool = True,
        metadata: dict[str, Any] | None = None,
        **_ignored: Any,
    ) -> bool:
        """Add an entry other plugins can call; False when a static entry already has this id."""
        meta = EntryMeta.make(
            entry_id,
            name=name,
            description=description,
            input_schema=input_schema,
            kind=kind,
            timeout=timeout,
            llm_result_fields=llm_result_fields,
            metadata=metadata,
        )
        return _svc(self).entries.register_dynamic(meta, handler, enabled=enabled)

    def unregister_dynamic_entry(self, entry_id: str) -> bool:
        """Remove a dynamic entry; False when there is none."""
        return _svc(self).entries.unregister_dynamic(entry_id)

    def list_entries(self, include_disabled: bool = False) -> list[dict[str, Any]]:
        """Every entry of this plugin (static and dynamic), as dicts."""
        return _svc(self).entries.list(include_disabled)

    def enable_entry(self, entry_id: str) -> bool:
        """Enable an entry; False when there is none."""
        return _svc(self).entries.set_enabled(entry_id, True)

    def disable_entry(self, entry_id: str) -> bool:
        """Disable an entry (calls to it get an `Err`); False when there is none."""
        return _svc(self).entries.set_enabled(entry_id, False)

    # -- timers ----------------------------------------------------------------------------------------------------

    def list_timers(self) -> list[dict[str, Any]]:
        """This plugin's `@timer_interval` timers: id, name, seconds, running."""
        return _svc(self).timers.list()

    def start_timer(self, timer_id: str) -> bool:
        """Start a timer (one declared with `auto_start=False`, or stopped); False when unknown or running."""
        return _svc(self).timers.start(timer_id)

    def stop_timer(self, timer_id: str) -> bool:
        """Stop a running timer; False when it was not running."""
        return _svc(self).timers.stop(timer_id)

    # -- messages --------------------------------------------------------------------------------------------------

    def push_message(self, **kwargs: Any) -> PushReceipt:
        """Push a proactive message (v2 schema: source, visibility, ai_behavior, parts, priority; plus session).

        Returns at once with a receipt: `submitted` True means only that the local submission path accepted
        responsibility; otherwise `reason` is `backpressure`, `transport_error` or `transport_unavailable` and
        `ok` is False. The receipt never contains the message or an exception text. See docs/sdk.md.
        """
        return _svc(self).push_message(**kwargs)


class PluginContextServicesMixin:
    """Seed 002's context methods on `PluginContext` (the class needs `plugin_id`, `config`, `manager`)."""

    plugin_dir: Path | None

    async def update_own_config(self: ServicedHandle, patch: dict[str, Any]) -> dict[str, Any]:
        """Update this plugin's config (validated against its schema, saved); returns the new config."""
        return await services_for(self).config.update(patch)

    @property
    def config_path(self) -> Path | None:
        """The plugin's manifest file (`manifest.json`), or None for a plugin class given in-process."""
        plugin_dir = self.plugin_dir
        return Path(plugin_dir) / "manifest.json" if plugin_dir is not None else None
