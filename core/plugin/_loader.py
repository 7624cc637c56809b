"""Finding, loading and stopping plugins: folders with a manifest, installed packages with an entry point, and
plugin classes handed over in-process. One plugin that fails is reported with its reason and skipped; stopping a
plugin removes everything it registered (hooks, tools, tags, tasks), by owner, never by name alone."""

from __future__ import annotations

import asyncio
import difflib
import importlib
import importlib.machinery
import importlib.metadata
import importlib.util
import inspect
import itertools
import json
import re
import sys
import threading
import time
import traceback
import types
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

import anyio
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version
from pydantic import ValidationError

import core
from core.builtins import builtin_plugins_dir
from core.chat import KiraLifecycleEvent
from core.plugin._base import BasePlugin, Manifest, PluginContext
from core.plugin._decorators import TAG_ATTR, TagMeta
from core.plugin._engine import HookEngine
from core.plugin._events import EventType
from core.plugin._ids import module_name_for
from core.plugin._kira import KiraRuntime
from core.services import PluginConfigError, PluginHost, bind_plugin, validate_config
from core.tag import FunctionTag, MediaPolicy
from core.utils.declarations import declared
from core.utils.log import logger
from core.utils.registry import OwnedRegistry
from core.utils.signals import hook_stuck, plugin_failed, plugin_loaded, plugin_unloaded, send
from core.utils.tasks import SHUTDOWN_GRACE, call_handler, must_propagate, wait_or_abandon
from core.utils.tool_utils import BaseTool

__all__ = [
    "PluginLoader",
    "PluginSource",
    "PluginStatus",
    "PluginLoadError",
    "ENTRY_POINT_GROUP",
    "ENTRY_MODULES",
    "KIRA_API_VERSION",
]

ENTRY_POINT_GROUP = "hookchat.plugins"
#: The manifest keys hookchat reads, and those KiraAI's manifests carry (kept, shown by the web console); any
#: other key is reported, with the nearest of these: a misspelt `core_version` would switch the version check off.
MANIFEST_KEYS = (
    "plugin_id",
    "display_name",
    "version",
    "author",
    "description",
    "core_version",
    "entry_class",
    "name",
    "desc",
    "repo",
    "icon",
    "tags",
    "locales",
    "uninstallable",
    "hide",
    "homepage",
    "license",
)
ENTRY_MODULES = ("main.py", "plugin.py", "__init__.py")

#: The KiraAI version whose plugin API hookchat implements (the one seed 003 documents), for manifests written for
#: KiraAI, whose `core_version` counts in KiraAI's versions. It is the `VERSION` of KiraAI's core/config/default.py
#: (v2.26.2) in the KiraAI source this compatibility was built against; see docs/plugins.md, "Plugins written for
#: KiraAI".
KIRA_API_VERSION = "2.26.2"
_MODULE_ROOT = "hookchat_plugins"
#: Seconds a plugin's import or `initialize()` may take before start-up reports it as slow.
SLOW_START = 2.0

State = Literal["discovered", "loaded", "disabled", "error"]
T = TypeVar("T")


class PluginLoadError(Exception):
    """A plugin could not be loaded; the message is the reason shown in the plugin status."""


@dataclass
class PluginSource:
    """Where a plugin comes from: a folder, an installed package's entry point, or a class given in-process."""

    plugin_id: str
    manifest: Manifest
    path: Path | None = None
    entry_point: importlib.metadata.EntryPoint | None = None
    plugin_class: type | None = None
    schema: dict[str, Any] | None = None
    builtin: bool = False  # one of the framework's own plugins (core/builtins), which a plugin of its id replaces
    #: Problems that do not stop the plugin (unknown manifest keys, a second plugin of this id refused).
    warnings: list[str] = field(default_factory=list)

    @property
    def origin(self) -> str:
        """A human-readable origin: the folder, `entry point <name>`, or the class name."""
        if self.path is not None:
            return str(self.path)
        if self.entry_point is not None:
            return f"entry point {self.entry_point.name} ({self.entry_point.value})"
        return f"class {getattr(self.plugin_class, '__qualname__', '?')}"


@dataclass
class PluginStatus:
    """One plugin's state (`loaded`, `disabled`, `error`, `discovered`), the reason for an error, and what it registered."""

    plugin_id: str
    state: State
    origin: str = ""
    version: str = ""
    reason: str | None = None
    hooks: list[str] = field(default_factory=list)
    tools: list[str] = field(default_factory=list)
    tags: list[str] = field(default_factory=list)
    tasks: int = 0
    #: For a loaded plugin whose manifest has a `core_version`: which version satisfied it (hookchat's own, or the
    #: KiraAI plugin API hookchat implements).
    compat: str | None = None
    #: Problems that did not stop the plugin: a second plugin refused for the same id, unknown manifest keys.
    warnings: list[str] = field(default_factory=list)
    #: True when the last reload failed and the previous version is the one running (`reason` says why).
    previous_version: bool = False
    #: Why and when a hook of this plugin last ignored its cancellation (this run or an earlier one; forgotten
    #: when a new version is loaded or its files change), None when it never did.
    fault: str | None = None


@dataclass
class _Imported:
    """A plugin's code, imported and not yet started."""

    source: PluginSource
    plugin_class: type
    modules: list[str]
    compat: str | None
    cfg: dict[str, Any]


@dataclass
class _Loaded:
    source: PluginSource
    instance: Any
    ctx: PluginContext
    modules: list[str]
    plugin_class: type
    compat: str | None
    cfg: dict[str, Any]  # the validated settings it started with (a failed reload restarts it with them)


class PluginLoader:
    """Loads plugins into a `HookEngine` and keeps the registries of what they contributed.

    `plugin_dirs` are scanned for plugin folders (each with `manifest.json`); installed distributions are scanned
    for the `hookchat.plugins` entry point group; then the `builtins` (ids of the framework's own plugins in
    `core/builtins`), each unless a plugin of its id was found already, which replaces it. Plugins load sorted by plugin id, which is also the tie-break
    order of equal-priority hooks. `plugin_config` maps plugin id to the operator's settings for it; `disabled`
    and `is_enabled` (the operator's enabled/disabled lists) decide which plugins `load_all` skips.
    """

    def __init__(
        self,
        engine: HookEngine | None = None,
        *,
        plugin_dirs: list[Path | str] = (),  # type: ignore[assignment]
        data_dir: Path | str = "data",
        plugin_config: dict[str, dict[str, Any]] | None = None,
        disabled: set[str] | frozenset[str] = frozenset(),
        is_enabled: Callable[[str], bool] | None = None,
        media_roots: list[Path | str] = (),  # type: ignore[assignment]
        private_paths: list[Path | str] = (),  # type: ignore[assignment]
        media_policy: MediaPolicy | None = None,
        entry_points: bool = True,
        builtins: Iterable[str] = (),
        config_source: str = "the configuration",
        init_timeout: float = 30.0,
        app: PluginHost | None = None,
        kira: KiraRuntime | None = None,
    ) -> None:
        self.engine = engine or HookEngine()
        self.plugin_dirs = [Path(p) for p in plugin_dirs]
        self.data_dir = Path(data_dir)
        self.plugin_config = dict(plugin_config or {})
        self.disabled_ids = set(disabled)
        self._is_enabled = is_enabled
        #: Never sendable by a tag: the data directory (history, plugin stores, runtime config) and `private_paths`.
        self.private_paths = [self.data_dir, *(Path(p) for p in private_paths)]
        self.media_roots = _public_roots([Path(p) for p in media_roots], self.private_paths)
        #: What model-steered tags may do beyond local files (mention everyone, media URLs): `[media]`.
        self.media_policy = media_policy or MediaPolicy()
        self.use_entry_points = entry_points
        self.builtins = tuple(builtins)
        self.config_source = config_source
        self.init_timeout = init_timeout
        self.app = app
        #: What KiraAI-style plugins reach through `ctx.adapter_mgr`, `ctx.config["bot_config"]`, ... (the app's).
        self.kira = kira
        self.tools: OwnedRegistry[BaseTool] = OwnedRegistry("tool")
        self.tags: OwnedRegistry[Any] = OwnedRegistry("tag")
        self._sources: dict[str, PluginSource] = {}
        self._loaded: dict[str, _Loaded] = {}
        self._status: dict[str, PluginStatus] = {}
        #: Plugins a hook of which ignored its cancellation, in this run or an earlier one (kept in the data
        #: directory, so `hookchat plugins` shows it): plugin id -> {"reason", "at"}.
        self._faults: dict[str, dict[str, Any]] = {}
        hook_stuck.connect(self._record_fault, sender=self.engine)  # held weakly: gone with the loader

    # -- discovery ------------------------------------------------------------------------------------------------

    def add_class(
        self, plugin_class: type, plugin_id: str | None = None, manifest: Manifest | None = None
    ) -> PluginSource:
        """Make an in-process plugin class loadable (used by the testing kit); the id defaults to the class name."""
        pid = plugin_id or (manifest.plugin_id if manifest else _snake(plugin_class.__name__))
        source = PluginSource(pid, manifest or Manifest(plugin_id=pid), plugin_class=plugin_class)
        self._add_source(source)
        return source

    def add_folder(self, path: Path | str) -> PluginSource | None:
        """Make the plugin folder at `path` loadable; an unreadable folder gets an error status and None."""
        try:
            source = _read_folder(Path(path))
        except PluginLoadError as exc:
            self._fail(Path(path).name, str(exc), str(path))
            return None
        self._add_source(source)
        return source

    def _add_source(self, source: PluginSource) -> None:
        pid = source.plugin_id
        known = self._sources.get(pid)
        if known is not None and known.origin != source.origin:
            if source.builtin:
                return  # the operator's plugin of this id replaces the built-in one
            if not known.builtin:
                problem = (
                    f"duplicate plugin id {pid!r}: {source.origin} was refused, because {known.origin} "
                    'has the same id; rename one of them (manifest.json "plugin_id")'
                )
                logger.warning("%s", problem)
                known.warnings.append(problem)
                return
            logger.info("plugin %r from %s replaces the built-in one", pid, source.origin)
            self._status.pop(pid, None)
        self._sources[pid] = source
        self._status.setdefault(pid, PluginStatus(pid, "discovered", source.origin, source.manifest.version))
        self.engine.set_load_order(sorted(self._sources))

    def discover(self) -> list[PluginSource]:
        """Scan the plugin directories and entry points; returns every source found (failures get an error status)."""
        found: list[PluginSource] = []
        for root in self.plugin_dirs:
            if not root.is_dir():
                continue
            for folder in sorted(p for p in root.iterdir() if p.is_dir()):
                if not (folder / "manifest.json").is_file():
                    entry = next((m for m in ("main.py", "plugin.py") if (folder / m).is_file()), None)
                    if entry is not None:  # it looks like a plugin: say why it is not loaded
                        self._fail(
                            folder.name, _NO_MANIFEST.format(folder=folder, entry=entry, id=folder.name), str(folder)
                        )
                    continue
                try:
                    source = _read_folder(folder)
                except PluginLoadError as exc:
                    self._fail(folder.name, str(exc), str(folder))
                    continue
                self._add_source(source)
                found.append(source)
        if self.use_entry_points:
            for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
                source = PluginSource(ep.name, Manifest(plugin_id=ep.name), entry_point=ep)
                self._add_source(source)
                found.append(source)
        if self.builtins:
            root = builtin_plugins_dir()
            for plugin_id in self.builtins:
                try:
                    source = _read_folder(root / plugin_id)
                except PluginLoadError as exc:  # a broken installation: say so, load the rest
                    self._fail(plugin_id, str(exc), str(root / plugin_id))
                    continue
                source.builtin = True
                self._add_source(source)
                found.append(source)
        return found

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def load_all(self) -> list[PluginStatus]:
        """Discover, then load every plugin not disabled by the operator, in plugin id order."""
        await anyio.to_thread.run_sync(self.discover)
        self._faults = await anyio.to_thread.run_sync(self._read_faults)
        for pid in sorted(set(self.plugin_config) - set(self._sources)):
            near = difflib.get_close_matches(pid, list(self._sources), n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"plugins found: {', '.join(sorted(self._sources))}"
            logger.warning(
                "%s: [plugins.config.%s] configures no plugin that was found: %s", self.config_source, pid, hint
            )
        for pid in sorted(self._sources):
            if pid in self.disabled_ids or (self._is_enabled is not None and not self._is_enabled(pid)):
                self._status[pid].state = "disabled"
                continue
            if pid not in self._loaded:
                await self.load(pid)
        return self.statuses()

    async def load(self, plugin_id: str) -> PluginStatus:
        """Import, configure, construct and initialise one plugin, then register its hooks, tools and tags.

        Never raises for a broken plugin: the returned status says `error` and why.
        """
        source = self._sources.get(plugin_id)
        if source is None:
            return self._fail(plugin_id, f"no plugin {plugin_id!r} was found in {self.plugin_dirs} or entry points")
        if plugin_id in self._loaded:
            return self._status[plugin_id]
        try:
            loaded = await self._start(plugin_id, await self._import_code(plugin_id, source))
        except BaseException as exc:
            if not _plugins_failure(exc):
                raise
            return self._fail(plugin_id, _reason(exc), source.origin, None if _expected(exc) else exc)
        return self._loaded_now(loaded)

    def _loaded_now(self, loaded: _Loaded) -> PluginStatus:
        plugin_id, source = loaded.ctx.plugin_id, loaded.source
        self._loaded[plugin_id] = loaded
        self._status[plugin_id] = PluginStatus(
            plugin_id, "loaded", source.origin, source.manifest.version, compat=loaded.compat
        )
        logger.info(
            "plugin %r loaded from %s%s", plugin_id, source.origin, f" ({loaded.compat})" if loaded.compat else ""
        )
        send(plugin_loaded, self, plugin_id=plugin_id)
        return self.status(plugin_id)  # type: ignore[return-value] - known now

    async def _import_code(self, plugin_id: str, source: PluginSource) -> _Imported:
        """Check the manifest's `core_version`, import the plugin's code under the start-up deadline and check the
        operator's settings against its schema (raises)."""
        compat = _check_core_version(source.manifest)
        plugin_class, modules = await self._timed(plugin_id, "import", self._import(source))
        try:
            cfg = validate_config(plugin_id, source.schema, self.plugin_config.get(plugin_id, {}))
        except PluginConfigError:
            await anyio.to_thread.run_sync(_forget_modules, modules)
            raise
        return _Imported(source, plugin_class, modules, compat, cfg)

    async def _start(self, plugin_id: str, code: _Imported, *, forget_on_failure: bool = True) -> _Loaded:
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
                manager=self,
            )
            instance = _construct(code.plugin_class, ctx, ctx.config)  # one object: in-place config updates reach cfg
            await self._timed(plugin_id, "initialize()", call_handler(instance.initialize))
            self.engine.register(instance, name=plugin_id)
            self._register_declared(instance, ctx)
        except BaseException as exc:
            # Plugin code may raise SystemExit, KeyboardInterrupt or any BaseException: that is this plugin's
            # failure, never the app's end (the caller reports it). A cancellation of the loader propagates.
            if _plugins_failure(exc):
                await self._discard(
                    plugin_id, instance, ctx, code.modules if forget_on_failure else [], terminate=instance is not None
                )
            raise
        return _Loaded(code.source, instance, ctx, code.modules, code.plugin_class, code.compat, code.cfg)

    async def unload(self, plugin_id: str) -> None:
        """Stop a plugin and forget it: hooks, tools, tags, tasks and its imported modules are removed."""
        await self._stop(plugin_id)
        self._sources.pop(plugin_id, None)
        self._status.pop(plugin_id, None)

    async def disable(self, plugin_id: str) -> None:
        """Stop a plugin but keep it known, with status `disabled`; `enable` loads it again."""
        await self._stop(plugin_id)
        self.disabled_ids.add(plugin_id)
        if plugin_id in self._sources:
            self._status[plugin_id] = PluginStatus(
                plugin_id, "disabled", self._sources[plugin_id].origin, self._sources[plugin_id].manifest.version
            )

    async def enable(self, plugin_id: str) -> PluginStatus:
        """Load a disabled (or failed) plugin."""
        self.disabled_ids.discard(plugin_id)
        return await self.load(plugin_id)

    async def reload(self, plugin_id: str) -> PluginStatus:
        """Re-read a plugin's folder (manifest, schema, code) and load it again (enabling it if disabled).

        A running plugin keeps serving until the new version has imported: a folder that cannot be read or code
        that does not import (a syntax error saved) leaves the old version running, and the status says why
        (`reason`, state still `loaded`). Then the old version stops and the new one initialises; if that fails,
        the old version is started again (a fresh instance of its class: its in-memory state is gone).
        """
        source = self._sources.get(plugin_id)
        self.disabled_ids.discard(plugin_id)
        old = self._loaded.get(plugin_id)
        fresh = source
        try:
            if source is not None and source.path is not None:
                fresh = await anyio.to_thread.run_sync(_read_folder, source.path)
        except PluginLoadError as exc:
            if old is None:
                return self._fail(plugin_id, str(exc), str(source.path if source else plugin_id))
            return self._keep_old(plugin_id, exc)
        if old is None or fresh is None:
            await self._stop(plugin_id)
            if fresh is not None:
                self._sources[plugin_id] = fresh
            return await self.load(plugin_id)
        try:
            await anyio.to_thread.run_sync(_forget_caches, old.modules)  # the new version reads the files afresh
            code = await self._import_code(plugin_id, fresh)
        except BaseException as exc:
            if not _plugins_failure(exc):
                raise
            return self._keep_old(plugin_id, exc)
        await self._stop(plugin_id, forget_modules=False)
        self._sources[plugin_id] = fresh
        try:
            loaded = await self._start(plugin_id, code)
        except BaseException as exc:
            if not _plugins_failure(exc):
                raise
            return await self._restore(old, exc)
        await anyio.to_thread.run_sync(_forget_modules, old.modules)
        if self._faults.pop(plugin_id, None) is not None:  # a new version: an earlier fault is no longer its own
            await anyio.to_thread.run_sync(self._write_faults)
        return self._loaded_now(loaded)

    def _keep_old(self, plugin_id: str, exc: BaseException, kept: str = "keeps running") -> PluginStatus:
        """A reload whose new version did not start: the previous version runs; one log line says why."""
        reason = f"reload failed, the previous version {kept}: {_reason(exc)}"
        logger.error("plugin %r: %s", plugin_id, reason, exc_info=None if _expected(exc) else exc)
        status = self._status[plugin_id]
        status.reason, status.previous_version = reason, True
        return self.status(plugin_id)  # type: ignore[return-value] - known

    async def _restore(self, old: _Loaded, exc: BaseException) -> PluginStatus:
        """The new version failed to start after the old one stopped: start the old version again."""
        plugin_id = old.ctx.plugin_id
        self._sources[plugin_id] = old.source
        try:
            loaded = await self._start(
                plugin_id, _Imported(old.source, old.plugin_class, old.modules, old.compat, old.cfg)
            )
        except BaseException as again:
            if not _plugins_failure(again):
                raise
            return self._fail(
                plugin_id,
                f"the new version failed ({_reason(exc)}), and the previous one failed to "
                f"start again ({_reason(again)})",
                old.source.origin,
            )
        self._loaded_now(loaded)
        return self._keep_old(plugin_id, exc, "was started again")

    def source(self, plugin_id: str) -> PluginSource | None:
        """Where the plugin comes from (its folder, entry point or class), or None when unknown."""
        return self._sources.get(plugin_id)

    def config_schema(self, plugin_id: str) -> dict[str, Any] | None:
        """The plugin's `schema.json` as read (None when it has none or is unknown)."""
        source = self._sources.get(plugin_id)
        return source.schema if source is not None else None

    def check_config(self, plugin_id: str, values: dict[str, Any]) -> dict[str, Any]:
        """The `cfg` the plugin would get with the operator's `values`; raises `PluginConfigError` naming the
        field when they do not fit its schema (nothing is changed)."""
        return validate_config(plugin_id, self.config_schema(plugin_id), values)

    async def configure(self, plugin_id: str, values: dict[str, Any]) -> PluginStatus:
        """Check `values` (`PluginConfigError` when they do not fit: the old settings stay), make them the
        plugin's settings, and reload it if loaded, so the new `cfg` applies without restarting the app."""
        self.check_config(plugin_id, values)
        self.plugin_config[plugin_id] = dict(values)
        if plugin_id in self._loaded:
            return await self.reload(plugin_id)
        return self._status.get(plugin_id) or self._fail(plugin_id, f"no plugin {plugin_id!r}")

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop every loaded plugin, in reverse load order. With `timeout` (seconds) the whole takes at most about
        that long: each `terminate()` gets what is left (at most `init_timeout`), and one that does not return in
        time is abandoned, so the plugins after it still stop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for pid in sorted(self._loaded, reverse=True):
            await self._stop(pid, deadline=deadline)

    async def _stop(self, plugin_id: str, *, forget_modules: bool = True, deadline: float | None = None) -> None:
        loaded = self._loaded.pop(plugin_id, None)
        if loaded is None:
            return
        await self._discard(
            plugin_id,
            loaded.instance,
            loaded.ctx,
            loaded.modules if forget_modules else [],
            terminate=True,
            deadline=deadline,
        )
        logger.info("plugin %r stopped", plugin_id)
        send(plugin_unloaded, self, plugin_id=plugin_id)

    async def _discard(
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
        if ctx is not None:
            ctx.closing = True  # from now on the plugin's services refuse new registrations
        if instance is not None and self.engine.is_registered(instance):
            self.engine.unregister(instance)
        self.tools.remove_owner(plugin_id)
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
        self.tools.remove_owner(plugin_id)
        self.tags.remove_owner(plugin_id)
        if modules:
            await anyio.to_thread.run_sync(_forget_modules, modules)

    def _fail(self, plugin_id: str, reason: str, origin: str = "", exc: BaseException | None = None) -> PluginStatus:
        """Record that `plugin_id` is not loaded and why (one log line; the traceback of an unexpected error)."""
        logger.error("plugin %r not loaded: %s", plugin_id, reason, exc_info=exc)
        status = self._status[plugin_id] = PluginStatus(plugin_id, "error", origin, reason=reason)
        send(plugin_failed, self, plugin_id=plugin_id, reason=reason)
        return status

    # -- import and registration ----------------------------------------------------------------------------------

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

    async def _import(self, source: PluginSource) -> tuple[type, list[str]]:
        """Import the plugin's code in a daemon thread and find its plugin class. A folder's code is imported
        under a package name no other import holds: the running version's (a reload) and one an abandoned
        import still executes are skipped, so a fixed save imports although that thread holds its import lock."""
        if source.plugin_class is not None:
            return source.plugin_class, []
        if source.entry_point is not None:
            entry_point = source.entry_point

            def load_entry_point() -> tuple[type, list[str]]:
                try:
                    obj = entry_point.load()
                except BaseException as exc:
                    raise PluginLoadError(
                        f"import of entry point {entry_point.value} failed: {type(exc).__name__}: {exc}"
                    ) from exc
                cls = obj if isinstance(obj, type) else _find_plugin_class(obj, source.plugin_id)
                return cls, []

            return await _in_daemon_thread(load_entry_point, f"import of entry point {entry_point.name}")
        assert source.path is not None
        package = _free_package_name(source.plugin_id)
        try:
            return await _in_daemon_thread(lambda: _import_folder(source, package), f"import of {package}")
        except anyio.get_cancelled_exc_class():
            _ABANDONED.add(package)  # the thread runs on, holding the package's import lock
            raise

    def _register_declared(self, instance: Any, ctx: PluginContext) -> None:
        """Register a plugin instance's declarations, owned by its id: tools (`@register.tool`, `@llm_tool`),
        entries and timers through `core.services.bind_plugin` (the path `register_llm_tool` takes too), then
        its `@register.tag` tags."""
        bind_plugin(instance, ctx)
        declared_tags = declared(instance, TAG_ATTR)
        if declared_tags:
            for name, fn in declared_tags:
                tag_meta: TagMeta = getattr(fn, TAG_ATTR)
                tag = FunctionTag(
                    tag_meta.name, tag_meta.description, getattr(instance, name), ctx=ctx, root=tag_meta.root
                )
                self.tags.add(tag_meta.name.lower(), tag, ctx.plugin_id)  # tag names match in any case

    # -- introspection --------------------------------------------------------------------------------------------

    def get_plugin(self, plugin_id: str) -> Any:
        """The loaded plugin instance, or None."""
        loaded = self._loaded.get(plugin_id)
        return loaded.instance if loaded else None

    def loaded_ids(self) -> list[str]:
        """The ids of loaded plugins, in load order."""
        return sorted(self._loaded)

    def status(self, plugin_id: str) -> PluginStatus | None:
        """One plugin's status, with what it registered right now; None when unknown."""
        status = self._status.get(plugin_id)
        if status is None:
            return None
        loaded = self._loaded.get(plugin_id)
        status.hooks = sorted(
            f"{e.event}:{e.hook_name}"
            for ev in self.engine.events()
            for e in self.engine.chain(ev)
            if e.plugin_id == plugin_id
        )
        status.tools = sorted(self.tools.by_owner(plugin_id))
        status.tags = sorted(self.tags.by_owner(plugin_id))
        status.tasks = len(loaded.ctx.tasks) if loaded else 0
        source = self._sources.get(plugin_id)
        status.warnings = list(source.warnings) if source is not None else []
        if loaded and plugin_id in self.engine.faulty:  # a hook ignored its cancellation: its hooks are off
            status.state, status.reason = "error", self.engine.faulty[plugin_id]
        fault = self._faults.get(plugin_id)
        status.fault = (
            f"{fault['reason']} ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(fault['at']))})" if fault else None
        )
        return status

    # -- faults that outlive the process ---------------------------------------------------------------------------

    @property
    def _faults_file(self) -> Path:
        return self.data_dir / "plugin_faults.json"

    def _record_fault(self, _engine: object, *, plugin_id: str, **_: object) -> None:
        """`hook_stuck`: remember that `plugin_id` is faulty, in the data directory too. A rare event and a few
        hundred bytes, so written at once rather than through a worker thread."""
        self._faults[plugin_id] = {"reason": self.engine.faulty.get(plugin_id, "faulty"), "at": time.time()}
        self._write_faults()

    def _write_faults(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self._faults_file.write_text(json.dumps(self._faults, indent=1), encoding="utf-8")
        except OSError as exc:
            logger.warning("cannot record plugin faults in %s: %s", self._faults_file, exc)

    def _read_faults(self) -> dict[str, dict[str, Any]]:
        """The faults recorded by earlier runs, minus those of plugins whose files changed since (fixed, we hope)."""
        try:
            raw = json.loads(self._faults_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return {}
        faults = {}
        for plugin_id, fault in raw.items() if isinstance(raw, dict) else ():
            source = self._sources.get(plugin_id)
            if not isinstance(fault, dict) or not isinstance(fault.get("at"), int | float) or source is None:
                continue
            if source.path is not None and _newest_change(source.path) > fault["at"]:
                continue
            faults[plugin_id] = fault
        return faults

    def statuses(self) -> list[PluginStatus]:
        """Every known plugin's status, sorted by plugin id."""
        return [s for pid in sorted(self._status) if (s := self.status(pid)) is not None]

    def hook_chains(self) -> dict[str, list[dict[str, Any]]]:
        """Per event, in pipeline order, the resolved hook order: plugin id, function, priority and deadline."""
        return {event: [e.describe() for e in self.engine.chain(event)] for event in self.engine.events()}

    async def dispatch_loaded(self, plugin_id: str | None = None) -> None:
        """Fire the `loaded` event (after start-up with None, or for one plugin enabled at run time)."""
        await self.engine.dispatch(EventType.LOADED.value, KiraLifecycleEvent(plugin_id))


# -- helpers ------------------------------------------------------------------------------------------------------


def _public_roots(roots: list[Path], private: list[Path]) -> list[Path]:
    """The media roots minus those inside a private path (refused with a warning); a root that contains one
    stays, and the tags' path check refuses the private files inside it."""
    kept = []
    for root in roots:
        real = root.resolve()
        inside = next((p for p in private if real.is_relative_to(p.resolve())), None)
        if inside is not None:
            logger.warning(
                "media directory %s refused: it is inside hookchat's private %s, whose files are never sent",
                root,
                inside,
            )
            continue
        kept.append(root)
    return kept


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def _newest_change(folder: Path) -> float:
    """The newest modification time of the files in a plugin folder (its caches left out)."""
    try:
        return max(
            (p.stat().st_mtime for p in folder.rglob("*") if "__pycache__" not in p.parts and p.is_file()), default=0.0
        )
    except OSError:
        return 0.0


def _plugins_failure(exc: BaseException) -> bool:
    """Whether `exc`, out of loading a plugin, is that plugin's failure: anything but a cancellation of the loader
    (or a real Ctrl-C)."""
    return not must_propagate(exc)


def _expected(exc: BaseException) -> bool:
    """A failure whose reason says everything (no traceback is logged for it)."""
    return isinstance(exc, PluginLoadError | PluginConfigError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, PluginLoadError | PluginConfigError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "initialize() did not finish in time"
    return f"{type(exc).__name__}: {exc}"


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginLoadError(f"cannot read {what} {path}: {exc}") from exc


_NO_MANIFEST = (
    "plugin folder {folder} has {entry} but no manifest.json, so it was not loaded: add "
    '{folder}/manifest.json, for example {{"plugin_id": "{id}", "display_name": "{id}", "version": '
    '"0.1.0"}} (docs/guide.md)'
)


def _read_folder(folder: Path) -> PluginSource:
    """Read a plugin folder's manifest and schema (no code is imported)."""
    raw = _read_json(folder / "manifest.json", "manifest")
    if isinstance(raw, dict):
        # KiraAI names a plugin after its folder when the manifest has no id, and accepts a numeric version.
        raw.setdefault("plugin_id", folder.name)
        if isinstance(raw.get("version"), int | float):
            raw["version"] = str(raw["version"])
    try:
        manifest = Manifest.model_validate(raw)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'manifest'}: {e['msg']}" for e in exc.errors())
        raise PluginLoadError(f"invalid manifest {folder / 'manifest.json'}: {problems}") from exc
    schema_file = folder / "schema.json"
    schema = _read_json(schema_file, "schema") if schema_file.is_file() else None
    if schema is not None and not isinstance(schema, dict):
        raise PluginLoadError(f"{schema_file} must be a JSON object of config fields")
    warnings = [_unknown_key(folder / "manifest.json", key) for key in sorted(raw) if key not in MANIFEST_KEYS]
    for warning in warnings:
        logger.warning("%s", warning)
    return PluginSource(manifest.plugin_id, manifest, path=folder.resolve(), schema=schema, warnings=warnings)


def _unknown_key(file: Path, key: str) -> str:
    near = difflib.get_close_matches(key, MANIFEST_KEYS, n=1)
    hint = f": did you mean {near[0]!r}?" if near else f" (known keys: {', '.join(sorted(MANIFEST_KEYS))})"
    return f"{file}: unknown manifest key {key!r}{hint}"


def _check_core_version(manifest: Manifest) -> str | None:
    """Check the manifest's `core_version` (a PEP 440 specifier; pre-releases count, as in KiraAI) against
    hookchat's version, then against the KiraAI plugin API version hookchat implements: a plugin written for
    KiraAI states the KiraAI version it needs. Returns which one satisfied it (None without a `core_version`);
    raises `PluginLoadError` when neither does."""
    wanted = manifest.core_version
    if not wanted:
        return None
    try:
        spec = SpecifierSet(wanted, prereleases=True)
    except InvalidSpecifier as exc:
        raise PluginLoadError(f"core_version {wanted!r} is not a PEP 440 specifier") from exc
    if Version(core.__version__) in spec:
        return f"core_version {wanted!r} satisfied by hookchat {core.__version__}"
    if Version(KIRA_API_VERSION) in spec:
        return f"core_version {wanted!r} satisfied by the KiraAI plugin API {KIRA_API_VERSION} that hookchat implements"
    raise PluginLoadError(
        f"needs hookchat {wanted}, but this is hookchat {core.__version__}, "
        f"and the KiraAI plugin API it implements ({KIRA_API_VERSION}) does not satisfy it either"
    )


#: Package names whose import was abandoned at the start-up deadline: its thread may still hold their import lock.
_ABANDONED: set[str] = set()


def _free_package_name(plugin_id: str) -> str:
    """`hookchat_plugins.<module name>`, or the same under `hookchat_plugins_2`, `_3`, ... when that name is
    taken (by the running version of the plugin, or by an abandoned import); the root module is made if needed."""
    name = module_name_for(plugin_id)
    for n in itertools.count(1):
        root = _MODULE_ROOT if n == 1 else f"{_MODULE_ROOT}_{n}"
        package = f"{root}.{name}"
        if package not in sys.modules and package not in _ABANDONED:
            break
    if root not in sys.modules:
        module = types.ModuleType(root)
        module.__path__ = []
        sys.modules[root] = module
    return package


async def _in_daemon_thread(work: Callable[[], T], name: str) -> T:
    """Run `work` in a new daemon thread and await its result. Cancelling the caller abandons the thread: it
    runs on until `work` returns, and being a daemon it never keeps the process from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, work())
        except BaseException as exc:
            outcome = (False, exc if isinstance(exc, Exception) else PluginLoadError(f"{type(exc).__name__}: {exc}"))
        try:
            loop.call_soon_threadsafe(settle, *outcome)
        except RuntimeError:  # the loop is closed: nobody waits any more
            pass

    threading.Thread(target=run, name=f"hookchat {name}", daemon=True).start()
    return await future


def _import_folder(source: PluginSource, package: str) -> tuple[type, list[str]]:
    folder = source.path
    assert folder is not None
    entry = next((name for name in ENTRY_MODULES if (folder / name).is_file()), None)
    if entry is None:
        raise PluginLoadError(f"{folder} has no entry module ({', '.join(ENTRY_MODULES)})")
    importlib.invalidate_caches()  # a file added since the last import must be found
    try:
        init = folder / "__init__.py"
        if init.is_file():
            spec = importlib.util.spec_from_file_location(package, init, submodule_search_locations=[str(folder)])
        else:
            # spec_from_file_location() gives None without a file: build the package spec for the bare folder.
            spec = importlib.machinery.ModuleSpec(package, None, is_package=True)
            spec.submodule_search_locations = [str(folder)]
        assert spec is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[package] = module
        if spec.loader is not None:
            spec.loader.exec_module(module)
        if entry != "__init__.py":
            module = importlib.import_module(f"{package}.{entry[:-3]}")
    except BaseException as exc:
        for name in _package_modules(package):
            sys.modules.pop(name, None)
        raise PluginLoadError(
            f"import of {folder / entry} failed: {_where_it_failed(exc, folder)}{type(exc).__name__}: {exc}"
        ) from exc
    return _find_plugin_class(module, source.plugin_id, source.manifest), _package_modules(package)


def _where_it_failed(exc: BaseException, folder: Path) -> str:
    """`file:line: source line` of the plugin's own code where `exc` arose (its innermost frame in `folder`, or
    the place a `SyntaxError` points at), followed by a space; "" when no frame of the plugin is involved."""
    if isinstance(exc, SyntaxError) and exc.filename:
        file, line, text = exc.filename, exc.lineno or 0, (exc.text or "").strip()
    else:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename).is_relative_to(folder)]
        if not frames:
            return ""
        file, line, text = frames[-1].filename, frames[-1].lineno or 0, (frames[-1].line or "").strip()
    return f"{file}:{line}: {text!r}: " if text else f"{file}:{line}: "


def _package_modules(package: str) -> list[str]:
    """The plugin's own modules. Libraries it imported stay: another copy of a library breaks its users (and
    extension modules cannot be imported twice)."""
    return sorted(m for m in list(sys.modules) if m == package or m.startswith(package + "."))


def _forget_modules(modules: list[str]) -> None:
    """Drop a stopped plugin's modules and their bytecode caches (`_forget_caches`)."""
    _forget_caches(modules)
    for name in modules:
        sys.modules.pop(name, None)


def _forget_caches(modules: list[str]) -> None:
    """Delete the bytecode caches of a plugin's modules, so the next import runs the files as they are then: a
    cache is trusted while the source keeps its size and its mtime in whole seconds, which misses an edit saved
    within the same second."""
    for name in modules:
        cached = getattr(getattr(sys.modules.get(name), "__spec__", None), "cached", None)
        if cached:
            try:
                Path(cached).unlink(missing_ok=True)
            except OSError:
                pass


def _find_plugin_class(module: Any, plugin_id: str, manifest: Manifest | None = None) -> type:
    """The plugin class: `entry_class` from the manifest, else the `BasePlugin` subclass the plugin's own code
    defines (in the entry module or a module of its package). Several: one from the entry module wins, then the
    first by name, with a warning, as KiraAI does."""
    wanted = (manifest.model_extra or {}).get("entry_class") if manifest else None
    name = getattr(module, "__name__", "")
    package = name if hasattr(module, "__path__") else name.rpartition(".")[0] or name
    classes = sorted(
        (
            obj
            for obj in vars(module).values()
            if isinstance(obj, type)
            and issubclass(obj, BasePlugin)
            and (obj.__module__ == package or obj.__module__.startswith(package + "."))
            and not inspect.isabstract(obj)
            and (wanted is None or obj.__name__ == wanted)
        ),
        key=lambda cls: (cls.__module__ != name, cls.__name__),
    )
    if not classes:
        raise PluginLoadError(
            f"plugin {plugin_id!r}: no BasePlugin subclass in {name}"
            + (f" called {wanted!r} (entry_class in manifest.json)" if wanted else "")
        )
    if len(classes) > 1:
        logger.warning(
            'plugin %r: several plugin classes (%s); loading %s (set "entry_class" in manifest.json to choose)',
            plugin_id,
            ", ".join(c.__name__ for c in classes),
            classes[0].__name__,
        )
    return classes[0]


def _construct(plugin_class: type, ctx: PluginContext, cfg: dict[str, Any]) -> Any:
    """Build the plugin instance; classes may define `_hookchat_construct(ctx, cfg)` to adapt other SDKs."""
    factory = getattr(plugin_class, "_hookchat_construct", None)
    if factory is not None:
        return factory(ctx, cfg)
    return plugin_class(ctx, cfg)
