"""Starting and stopping one plugin: its code imported and its settings checked (`Imported`), its context made,
its instance built and initialised under the start-up deadline, its hooks, tools and tags registered under its id
(`Running`); and on a stop or a failed start everything it registered removed again, by owner.

`PluginRunner` does this for the loader, which decides which plugin starts or stops when."""

from __future__ import annotations

import time
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio

from core.plugin._base import PluginContext
from core.plugin._decorators import TAG_ATTR, TagMeta
from core.plugin._host import PluginManagerView
from core.plugin._importer import check_core_version, forget_modules, import_plugin
from core.plugin._source import PluginLoadError, PluginSource
from core.services import PluginConfigError, bind_plugin, validate_config
from core.tag import FunctionTag
from core.utils.declarations import declared
from core.utils.log import logger
from core.utils.registry import OwnedRegistry
from core.utils.tasks import SHUTDOWN_GRACE, call_handler, must_propagate, wait_or_abandon

__all__ = ["Imported", "PluginRunner", "Running", "SLOW_START", "expected", "plugins_failure", "reason"]

#: Seconds a plugin's import or `initialize()` may take before start-up reports it as slow.
SLOW_START = 2.0


@dataclass
class Imported:
    """A plugin's code, imported and not yet started, with the settings it will start with."""

    source: PluginSource
    plugin_class: type
    modules: list[str]
    compat: str | None
    cfg: dict[str, Any]


@dataclass
class Running:
    """A started plugin: its instance and context, and what it was started from (a failed reload restarts it)."""

    source: PluginSource
    instance: Any
    ctx: PluginContext
    modules: list[str]
    plugin_class: type
    compat: str | None
    cfg: dict[str, Any]  # the validated settings it started with

    def code(self) -> Imported:
        """What it was started from, to start it again."""
        return Imported(self.source, self.plugin_class, self.modules, self.compat, self.cfg)


class PluginRunner:
    """Starts and stops plugins for `manager` (the loader as contexts see it: its engine gets the hooks, its tool
    registry the tools); `tags` gets their `@register.tag` tags. Every start-up stage runs under `init_timeout`."""

    def __init__(
        self, manager: PluginManagerView, tags: OwnedRegistry[Any], *, data_dir: Path, init_timeout: float
    ) -> None:
        self.manager = manager
        self.tags = tags
        self.data_dir = data_dir
        self.init_timeout = init_timeout

    async def prepare(self, plugin_id: str, source: PluginSource, settings: dict[str, Any]) -> Imported:
        """Check the manifest's `core_version`, import the plugin's code under the start-up deadline and check the
        operator's `settings` against its schema (raises)."""
        compat = check_core_version(source.manifest)
        plugin_class, modules = await self._timed(plugin_id, "import", import_plugin(source))
        try:
            cfg = validate_config(plugin_id, source.schema, settings)
        except PluginConfigError:
            forget_modules(modules)
            raise
        return Imported(source, plugin_class, modules, compat, cfg)

    async def start(self, plugin_id: str, code: Imported, *, forget_on_failure: bool = True) -> Running:
        """Configure, construct and initialise an imported plugin and register what it declares (raises; on a
        failure everything it registered is removed, and its modules too unless `forget_on_failure` is False)."""
        ctx: PluginContext | None = None
        instance: Any = None
        try:
            ctx = PluginContext(
                plugin_id,
                manifest=code.source.manifest,
                plugin_dir=code.source.path,
                data_dir=self.data_dir / "plugin_data" / plugin_id,
                config=code.cfg,
                manager=self.manager,
            )
            instance = _construct(code.plugin_class, ctx, ctx.config)  # one object: in-place config updates reach cfg
            await self._timed(plugin_id, "initialize()", call_handler(instance.initialize))
            self.manager.engine.register(instance, name=plugin_id)
            self._register_declared(instance, ctx)
        except BaseException as exc:
            # Plugin code may raise SystemExit, KeyboardInterrupt or any BaseException: that is this plugin's
            # failure, never the app's end (the caller reports it). A cancellation of the loader propagates.
            if plugins_failure(exc):
                await self.discard(
                    plugin_id, instance, ctx, code.modules if forget_on_failure else [], terminate=instance is not None
                )
            raise
        return Running(code.source, instance, ctx, code.modules, code.plugin_class, code.compat, code.cfg)

    async def stop(self, running: Running, *, forget_modules: bool = True, deadline: float | None = None) -> None:
        """Stop a started plugin: `terminate()`, its tasks, and everything it registered."""
        modules = running.modules if forget_modules else []
        await self.discard(
            running.ctx.plugin_id, running.instance, running.ctx, modules, terminate=True, deadline=deadline
        )

    async def discard(
        self,
        plugin_id: str,
        instance: Any,
        ctx: PluginContext | None,
        modules: list[str],
        *,
        terminate: bool,
        deadline: float | None = None,
    ) -> None:
        """Remove everything `plugin_id` registered; run `terminate()` if asked: isolated (its `SystemExit` is
        logged), bounded by `init_timeout` and `deadline` (a `time.monotonic()` value), and abandoned if it
        ignores its cancellation."""
        engine, tools = self.manager.engine, self.manager.tools
        if ctx is not None:
            ctx.closing = True  # from now on the plugin's services refuse new registrations
        if instance is not None and engine.is_registered(instance):
            engine.unregister(instance)
        tools.remove_owner(plugin_id)
        self.tags.remove_owner(plugin_id)
        left = self.init_timeout if deadline is None else min(self.init_timeout, deadline - time.monotonic())
        if terminate and instance is not None:
            await wait_or_abandon(
                call_handler(instance.terminate), left * 0.8, f"plugin {plugin_id!r}: terminate()", grace=left * 0.2
            )
        if ctx is not None:
            left = SHUTDOWN_GRACE if deadline is None else min(SHUTDOWN_GRACE, deadline - time.monotonic())
            await ctx.close(grace=max(left, 0))
        # Again, after terminate() and the plugin's tasks are done: anything they registered meanwhile goes too.
        tools.remove_owner(plugin_id)
        self.tags.remove_owner(plugin_id)
        forget_modules(modules)

    async def _timed(self, plugin_id: str, stage: str, work: Awaitable[Any]) -> Any:
        """Await one start-up stage of a plugin under the start-up deadline (`init_timeout`): slower than
        `SLOW_START` is reported with its time; past the deadline it fails the plugin (a worker thread that does
        not return is abandoned). Elapsed time is checked after the stage too, since code that blocks the loop
        cannot be interrupted."""
        started = time.perf_counter()
        try:
            with anyio.fail_after(self.init_timeout):
                result = await work
        except TimeoutError:
            raise PluginLoadError(
                f"{stage} did not finish within the start-up deadline of {self.init_timeout:g} s; "
                "the plugin was skipped (a worker thread still running it was abandoned)"
            ) from None
        elapsed = time.perf_counter() - started
        if elapsed > self.init_timeout:
            raise PluginLoadError(
                f"{stage} took {elapsed:.1f} s, past the start-up deadline of "
                f"{self.init_timeout:g} s (it blocked the event loop)"
            )
        if elapsed > SLOW_START:
            logger.warning(
                "plugin %r: %s took %.1f s; move slow work out of start-up (or into a background task)",
                plugin_id,
                stage,
                elapsed,
            )
        return result

    def _register_declared(self, instance: Any, ctx: PluginContext) -> None:
        """Register a plugin instance's declarations, owned by its id: tools (`@register.tool`, `@llm_tool`),
        entries and timers through `core.services.bind_plugin` (the path `register_llm_tool` takes too), then
        its `@register.tag` tags."""
        bind_plugin(instance, ctx)
        for name, fn in declared(instance, TAG_ATTR):
            tag_meta: TagMeta = getattr(fn, TAG_ATTR)
            tag = FunctionTag(tag_meta.name, tag_meta.description, getattr(instance, name), ctx=ctx, root=tag_meta.root)
            self.tags.add(tag_meta.name.lower(), tag, ctx.plugin_id)  # tag names match in any case


def _construct(plugin_class: type, ctx: PluginContext, cfg: dict[str, Any]) -> Any:
    """Build the plugin instance; classes may define `_hookchat_construct(ctx, cfg)` to adapt other SDKs."""
    factory = getattr(plugin_class, "_hookchat_construct", None)
    if factory is not None:
        return factory(ctx, cfg)
    return plugin_class(ctx, cfg)


def plugins_failure(exc: BaseException) -> bool:
    """Whether `exc`, out of loading a plugin, is that plugin's failure: anything but a cancellation of the loader
    (or a real Ctrl-C)."""
    return not must_propagate(exc)


def expected(exc: BaseException) -> bool:
    """A failure whose reason says everything (no traceback is logged for it)."""
    return isinstance(exc, PluginLoadError | PluginConfigError)


def reason(exc: BaseException) -> str:
    """The reason a plugin's status shows for `exc`."""
    if isinstance(exc, PluginLoadError | PluginConfigError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "initialize() did not finish in time"
    return f"{type(exc).__name__}: {exc}"
