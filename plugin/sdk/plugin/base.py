"""`NekoPluginBase`: the SDK's plugin base class as a `core.plugin.BasePlugin` (so the loader finds it), built from
`ctx` alone; `@lifecycle` steps run at initialize/terminate, and the services come from `BasePlugin`'s
`PluginServicesMixin`.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from core.plugin import BasePlugin, PluginContext
from core.services import (
    LIFECYCLE_ATTR,
    Entry,
    Err,
    LifecycleMeta,
    Ok,
    PluginLogger,
    SdkError,
    bind_plugin,
    declared,
    get_plugin_logger,
    services_for,
)
from core.utils.tasks import call_handler
from plugin.sdk.plugin.extras import PluginI18n
from plugin.sdk.plugin.host import SdkBus, SystemInfo

__all__ = ["NekoPluginBase", "PluginMeta"]


@dataclass(frozen=True)
class PluginMeta:
    """What `@neko_plugin` records on a plugin class: its id, name, version and description."""

    id: str
    name: str = ""
    version: str = "0.0.0"
    description: str = ""


class NekoPluginBase(BasePlugin):
    """Base class of SDK plugins: `__init__(self, ctx)`; declarations with `@llm_tool`, `@plugin_entry`,
    `@timer_interval`, `@lifecycle`; services as attributes (`logger`, `config`, `store`, `db`, `plugins`...).

    At `initialize()`: saved config overrides are applied, `@lifecycle(id="startup")` runs (an `Err` or an
    exception refuses the load), then tools are registered, entries collected and timers started. At
    `terminate()`: `@lifecycle(id="shutdown")` runs; the framework then removes the plugin's tools, timers, tasks
    and entries in one step.
    """

    def __init__(self, ctx: PluginContext) -> None:
        super().__init__(ctx, ctx.config)
        self._logger = get_plugin_logger(ctx.plugin_id)
        self._routers: dict[str, Any] = {}
        self._bus: SdkBus | None = None
        self._i18n: Any = None
        self.last_status: dict[str, Any] | None = None

    @classmethod
    def _hookchat_construct(cls, ctx: PluginContext, cfg: dict[str, Any]) -> NekoPluginBase:
        """How the hookchat loader builds an SDK plugin: with `ctx` only (its `config` is the validated `cfg`)."""
        if ctx.config is not cfg:
            ctx.config = ctx.config.with_settings(cfg)
        return cls(ctx)

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def initialize(self) -> None:
        """Apply saved config overrides, run the `startup` lifecycle, then register declarations."""
        await services_for(self.ctx, self).config.reload_runtime_overrides()
        result = await self._run_lifecycle("startup")
        if isinstance(result, Err):
            error = result.error
            raise error if isinstance(error, Exception) else SdkError(f"startup refused: {error!r}")
        bind_plugin(self, self.ctx)

    async def terminate(self) -> None:
        """Run the `shutdown` lifecycle."""
        await self._run_lifecycle("shutdown")

    async def _run_lifecycle(self, step: str, **kwargs: Any) -> Any:
        outcome: Any = Ok(None)
        for attr, fn in declared(self, LIFECYCLE_ATTR):
            meta: LifecycleMeta = getattr(fn, LIFECYCLE_ATTR)
            if meta.id != step:
                continue
            outcome = await call_handler(getattr(self, attr), **kwargs)
            if isinstance(outcome, Err):
                return outcome
        return outcome

    async def _hookchat_config_changed(self, config: dict[str, Any]) -> None:
        await self._run_lifecycle("config_change", config=config)

    # -- properties of the seed ---------------------------------------------------------------------------------------

    @property
    def logger(self) -> PluginLogger:
        """This plugin's logger; `{}` and `%s` placeholders both work."""
        return self._logger

    @property
    def plugin_dir(self) -> Path:
        """The installed plugin directory (code, manifest, assets); for a class given in-process, its module's
        directory (or the storage directory when the class has no source file)."""
        if self.ctx.plugin_dir is not None:
            return Path(self.ctx.plugin_dir)
        try:
            return Path(inspect.getfile(type(self))).resolve().parent
        except (TypeError, OSError):
            return self.storage_dir

    @property
    def config_dir(self) -> Path:
        """Compatibility alias of `plugin_dir`."""
        return self.plugin_dir

    @property
    def storage_dir(self) -> Path:
        """The plugin's storage root (`<data>/plugin_data/<plugin_id>`)."""
        return services_for(self.ctx, self).storage_dir

    @property
    def runtime_config_path(self) -> Path:
        """Where config updates are saved (`<storage>/runtime_config.json`)."""
        return services_for(self.ctx, self).runtime_config_path

    @property
    def metadata(self) -> dict[str, Any]:
        """The plugin's manifest as a dict."""
        return self.ctx.metadata

    @property
    def meta(self) -> PluginMeta:
        """The plugin's `PluginMeta`, from its manifest."""
        m = self.ctx.manifest
        return PluginMeta(m.plugin_id, m.display_name or m.plugin_id, m.version, m.description)

    @property
    def bus(self) -> SdkBus:
        """Read-only facade of the original host's stores (empty in hookchat; see docs/sdk.md)."""
        if self._bus is None:
            self._bus = SdkBus()
        return self._bus

    @property
    def system_info(self) -> SystemInfo:
        """Host system metadata; every method returns a `Result`."""
        return SystemInfo(self.ctx)

    @property
    def i18n(self) -> Any:
        """Plugin-local translations from `<plugin_dir>/i18n/<locale>.json`."""
        if self._i18n is None:
            settings = (self.ctx.manifest.model_extra or {}).get("i18n") or {}
            self._i18n = PluginI18n(
                self.plugin_dir, settings.get("default_locale", "en"), settings.get("fallback_locale", "en")
            )
        return self._i18n

    # -- host round-trips of the original SDK, mapped to what exists here ----------------------------------------------

    def report_status(self, status: dict[str, Any]) -> None:
        """Record the plugin's status (`self.last_status`) and log it; hookchat has no status panel."""
        self.last_status = dict(status)
        self._logger.info("status: %s", status)

    async def run_update(self, **kwargs: Any) -> None:
        """Progress of a long operation: logged (hookchat has no host task view)."""
        self._logger.info("update: %s", ", ".join(sorted(kwargs)))

    async def export_push(self, **kwargs: Any) -> None:
        """Export data for the original host: not available; raises `SdkError`."""
        raise SdkError("export_push() is not available in hookchat (no host export channel)", code="not_supported")

    async def finish(self, data: Any = None, reply: bool = True, **_kwargs: Any) -> Any:
        """End an entry with `data`: returns it, so `return await self.finish(data=...)` returns the data. `reply`
        has no effect: whether the bot speaks is decided by the caller of the entry."""
        return data

    def register_static_ui(
        self, directory: str, *, index_file: str = "index.html", cache_control: str | None = None
    ) -> bool:
        """Not available (hookchat serves no plugin UI): logs a warning and returns False."""
        self._logger.warning("register_static_ui(%r) ignored: hookchat serves no plugin UI", directory)
        return False

    # -- routers ---------------------------------------------------------------------------------------------------

    def include_router(self, router: Any, *, prefix: str | None = None) -> None:
        """Mount a `PluginRouter`: its entries become this plugin's, with ids `<prefix><id>`."""
        if router.name in self._routers:
            raise SdkError(f"a router called {router.name!r} is already mounted", code="invalid_argument")
        entries = services_for(self.ctx, self).entries
        prefix = router.prefix if prefix is None else prefix
        router.plugin = self
        router.mounted_ids = []
        for meta, handler in router.entries():
            entry_id = f"{prefix}{meta.id}"
            entries.add_static(Entry.from_meta(meta, handler, entry_id))
            router.mounted_ids.append(entry_id)
        self._routers[router.name] = router

    def exclude_router(self, router_or_name: Any) -> bool:
        """Unmount a router (or router name) and remove its entries; False when it is not mounted."""
        name = router_or_name if isinstance(router_or_name, str) else getattr(router_or_name, "name", None)
        router = self._routers.pop(name, None) if isinstance(name, str) else None
        if router is None:
            return False
        entries = services_for(self.ctx, self).entries
        for entry_id in router.mounted_ids:
            entries.remove(entry_id)
        router.plugin = None
        return True

    def get_router(self, name: str) -> Any:
        """The mounted router called `name`, or None."""
        return self._routers.get(name)

    def list_routers(self) -> list[str]:
        """The names of the mounted routers."""
        return sorted(self._routers)
