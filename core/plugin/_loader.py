"""Finding, loading and stopping plugins: folders with a manifest, installed packages with an entry point, and
plugin classes handed over in-process. One plugin that fails is reported with its reason and skipped; stopping a
plugin removes everything it registered (hooks, tools, tags, tasks), by owner, never by name alone.

`PluginLoader` decides which plugin starts or stops when; its parts do the work: `PluginCatalog` (where each
plugin comes from), `core.plugin._importer` (the guarded import), `PluginRunner` (starting and stopping one
plugin), `PluginStatus` and `FaultLog` (what is said about each)."""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import anyio

from core.chat import KiraLifecycleEvent
from core.plugin._engine import HookEngine
from core.plugin._events import EventType
from core.plugin._host import KiraRuntime
from core.plugin._importer import KIRA_API_VERSION, forget_caches, forget_modules
from core.plugin._lifecycle import PluginRunner, Running, expected, plugins_failure, reason
from core.plugin._source import (
    ENTRY_POINT_GROUP,
    Manifest,
    PluginCatalog,
    PluginLoadError,
    PluginSource,
    ScanFailure,
    read_folder,
)
from core.plugin._status import FaultLog, PluginStatus
from core.services import PluginHost, validate_config
from core.tag import MediaPolicy
from core.utils.heap import thaw
from core.utils.log import logger
from core.utils.registry import OwnedRegistry
from core.utils.signals import hook_stuck, plugin_failed, plugin_loaded, plugin_unloaded, send
from core.utils.tool_utils import BaseTool

__all__ = [
    "PluginLoader",
    "PluginSource",
    "PluginStatus",
    "PluginLoadError",
    "ENTRY_POINT_GROUP",
    "KIRA_API_VERSION",
]


class PluginLoader:
    """Loads plugins into a `HookEngine` and keeps the registries of what they contributed.

    `plugin_dirs` are scanned for plugin folders (each with `manifest.json`); installed distributions are scanned
    for the `hookchat.plugins` entry point group; then the `builtins` (ids of the framework's own plugins in
    `core/builtins`), each unless a plugin of its id was found already, which replaces it. Plugins load sorted by
    plugin id, which is also the tie-break order of equal-priority hooks. `plugin_config` maps plugin id to the
    operator's settings for it; `disabled` and `is_enabled` (the operator's enabled/disabled lists) decide which
    plugins `load_all` skips. What plugin contexts see of it is `core.plugin._host.PluginManagerView`.
    """

    def __init__(
        self,
        engine: HookEngine | None = None,
        *,
        plugin_dirs: Iterable[Path | str] = (),
        data_dir: Path | str = "data",
        plugin_config: dict[str, dict[str, Any]] | None = None,
        disabled: set[str] | frozenset[str] = frozenset(),
        is_enabled: Callable[[str], bool] | None = None,
        media_roots: Iterable[Path | str] = (),
        private_paths: Iterable[Path | str] = (),
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
        self._catalog = PluginCatalog()
        self._runner = PluginRunner(self, self.tags, data_dir=self.data_dir, init_timeout=init_timeout)
        self._loaded: dict[str, Running] = {}
        self._status: dict[str, PluginStatus] = {}
        #: Plugins a hook of which ignored its cancellation, in this run or an earlier one (`hookchat plugins`).
        self._faults = FaultLog(self.data_dir)
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
            source = read_folder(Path(path))
        except PluginLoadError as exc:
            self._fail(Path(path).name, str(exc), str(path))
            return None
        self._add_source(source)
        return source

    def _add_source(self, source: PluginSource) -> None:
        outcome = self._catalog.add(source)
        if outcome is None:
            return
        pid = source.plugin_id
        if outcome == "replaced":
            self._status.pop(pid, None)
        self._status.setdefault(pid, PluginStatus(pid, "discovered", source.origin, source.manifest.version))
        self.engine.set_load_order(self._catalog.ids())

    def discover(self) -> list[PluginSource]:
        """Scan the plugin directories and entry points; returns every source found (failures get an error status)."""
        found: list[PluginSource] = []
        scan = self._catalog.scan(self.plugin_dirs, entry_points=self.use_entry_points, builtins=self.builtins)
        for item in scan:
            if isinstance(item, ScanFailure):
                self._fail(item.plugin_id, item.reason, item.origin)
            else:
                self._add_source(item)
                found.append(item)
        return found

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def load_all(self) -> list[PluginStatus]:
        """Discover, then load every plugin not disabled by the operator, in plugin id order."""
        await anyio.to_thread.run_sync(self.discover)
        ids = self._catalog.ids()
        folders = {pid: source.path for pid in ids if (source := self._catalog.get(pid)) is not None}
        await anyio.to_thread.run_sync(self._faults.read, folders)
        for pid in sorted(set(self.plugin_config) - set(ids)):
            near = difflib.get_close_matches(pid, ids, n=1)
            hint = f"did you mean {near[0]!r}?" if near else f"plugins found: {', '.join(ids)}"
            logger.warning(
                "%s: [plugins.config.%s] configures no plugin that was found: %s", self.config_source, pid, hint
            )
        for pid in ids:
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
        source = self._catalog.get(plugin_id)
        if source is None:
            return self._fail(plugin_id, f"no plugin {plugin_id!r} was found in {self.plugin_dirs} or entry points")
        if plugin_id in self._loaded:
            return self._status[plugin_id]
        try:
            code = await self._runner.prepare(plugin_id, source, self.plugin_config.get(plugin_id, {}))
            running = await self._runner.start(plugin_id, code)
        except BaseException as exc:
            if not plugins_failure(exc):
                raise
            return self._fail(plugin_id, reason(exc), source.origin, None if expected(exc) else exc)
        return self._loaded_now(running)

    def _loaded_now(self, running: Running) -> PluginStatus:
        plugin_id, source = running.ctx.plugin_id, running.source
        self._loaded[plugin_id] = running
        self._status[plugin_id] = status = PluginStatus(
            plugin_id, "loaded", source.origin, source.manifest.version, compat=running.compat
        )
        logger.info(
            "plugin %r loaded from %s%s", plugin_id, source.origin, f" ({running.compat})" if running.compat else ""
        )
        send(plugin_loaded, self, plugin_id=plugin_id)
        return self._current(status)

    async def unload(self, plugin_id: str) -> None:
        """Stop a plugin and forget it: hooks, tools, tags, tasks and its imported modules are removed."""
        await self._stop(plugin_id)
        self._catalog.forget(plugin_id)
        self._status.pop(plugin_id, None)

    async def disable(self, plugin_id: str) -> None:
        """Stop a plugin but keep it known, with status `disabled`; `enable` loads it again."""
        await self._stop(plugin_id)
        self.disabled_ids.add(plugin_id)
        source = self._catalog.get(plugin_id)
        if source is not None:
            self._status[plugin_id] = PluginStatus(plugin_id, "disabled", source.origin, source.manifest.version)

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
        source = self._catalog.get(plugin_id)
        self.disabled_ids.discard(plugin_id)
        old = self._loaded.get(plugin_id)
        fresh = source
        try:
            if source is not None and source.path is not None:
                fresh = await anyio.to_thread.run_sync(read_folder, source.path)
        except PluginLoadError as exc:
            if old is None:
                return self._fail(plugin_id, str(exc), str(source.path if source else plugin_id))
            return self._keep_old(plugin_id, exc)
        if old is None or fresh is None:
            await self._stop(plugin_id)
            if fresh is not None:
                self._catalog.put(fresh)
            return await self.load(plugin_id)
        try:
            forget_caches(old.modules)  # the new version reads the files afresh
            code = await self._runner.prepare(plugin_id, fresh, self.plugin_config.get(plugin_id, {}))
        except BaseException as exc:
            if not plugins_failure(exc):
                raise
            return self._keep_old(plugin_id, exc)
        await self._stop(plugin_id, forget_modules=False)
        self._catalog.put(fresh)
        try:
            running = await self._runner.start(plugin_id, code)
        except BaseException as exc:
            if not plugins_failure(exc):
                raise
            return await self._restore(old, exc)
        forget_modules(old.modules)
        if plugin_id in self._faults:  # a new version: an earlier fault is no longer its own
            await anyio.to_thread.run_sync(self._faults.forget, plugin_id)
        return self._loaded_now(running)

    def _keep_old(self, plugin_id: str, exc: BaseException, kept: str = "keeps running") -> PluginStatus:
        """A reload whose new version did not start: the previous version runs; one log line says why."""
        why = f"reload failed, the previous version {kept}: {reason(exc)}"
        logger.error("plugin %r: %s", plugin_id, why, exc_info=None if expected(exc) else exc)
        status = self._status[plugin_id]
        status.reason, status.previous_version = why, True
        return self._current(status)

    async def _restore(self, old: Running, exc: BaseException) -> PluginStatus:
        """The new version failed to start after the old one stopped: start the old version again."""
        plugin_id = old.ctx.plugin_id
        self._catalog.put(old.source)
        try:
            running = await self._runner.start(plugin_id, old.code())
        except BaseException as again:
            if not plugins_failure(again):
                raise
            return self._fail(
                plugin_id,
                f"the new version failed ({reason(exc)}), and the previous one failed to start again ({reason(again)})",
                old.source.origin,
            )
        self._loaded_now(running)
        return self._keep_old(plugin_id, exc, "was started again")

    async def shutdown(self, timeout: float | None = None) -> None:  # a budget shared out, not one scope
        """Stop every loaded plugin, in reverse load order. With `timeout` (seconds) the whole takes at most about
        that long: each `terminate()` gets what is left (at most `init_timeout`), and one that does not return in
        time is abandoned, so the plugins after it still stop."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for pid in sorted(self._loaded, reverse=True):
            await self._stop(pid, deadline=deadline)

    async def _stop(self, plugin_id: str, *, forget_modules: bool = True, deadline: float | None = None) -> None:
        running = self._loaded.pop(plugin_id, None)
        if running is None:
            return
        await self._runner.stop(running, forget_modules=forget_modules, deadline=deadline)
        thaw()  # its module's objects, frozen when the bot started, must be collectable now
        logger.info("plugin %r stopped", plugin_id)
        send(plugin_unloaded, self, plugin_id=plugin_id)

    def _fail(self, plugin_id: str, why: str, origin: str = "", exc: BaseException | None = None) -> PluginStatus:
        """Record that `plugin_id` is not loaded and why (one log line; the traceback of an unexpected error)."""
        logger.error("plugin %r not loaded: %s", plugin_id, why, exc_info=exc)
        status = self._status[plugin_id] = PluginStatus(plugin_id, "error", origin, reason=why)
        send(plugin_failed, self, plugin_id=plugin_id, reason=why)
        return status

    def _record_fault(self, _engine: object, *, plugin_id: str, **_: object) -> None:
        """`hook_stuck`: remember that `plugin_id` is faulty, in the data directory too."""
        self._faults.record(plugin_id, self.engine.faulty.get(plugin_id, "faulty"))

    # -- settings -------------------------------------------------------------------------------------------------

    def source(self, plugin_id: str) -> PluginSource | None:
        """Where the plugin comes from (its folder, entry point or class), or None when unknown."""
        return self._catalog.get(plugin_id)

    def config_schema(self, plugin_id: str) -> dict[str, Any] | None:
        """The plugin's `schema.json` as read (None when it has none or is unknown)."""
        source = self._catalog.get(plugin_id)
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

    # -- introspection --------------------------------------------------------------------------------------------

    def get_plugin(self, plugin_id: str) -> Any:
        """The loaded plugin instance, or None."""
        running = self._loaded.get(plugin_id)
        return running.instance if running else None

    def loaded_ids(self) -> list[str]:
        """The ids of loaded plugins, in load order."""
        return sorted(self._loaded)

    def status(self, plugin_id: str) -> PluginStatus | None:
        """One plugin's status, with what it registered right now; None when unknown."""
        status = self._status.get(plugin_id)
        return self._current(status) if status is not None else None

    def _current(self, status: PluginStatus) -> PluginStatus:
        """`status` brought up to date: what its plugin registered, its tasks, warnings and faults."""
        plugin_id = status.plugin_id
        running = self._loaded.get(plugin_id)
        status.hooks = sorted(
            f"{e.event}:{e.hook_name}"
            for ev in self.engine.events()
            for e in self.engine.chain(ev)
            if e.plugin_id == plugin_id
        )
        status.tools = sorted(self.tools.by_owner(plugin_id))
        status.tags = sorted(self.tags.by_owner(plugin_id))
        status.tasks = len(running.ctx.tasks) if running else 0
        source = self._catalog.get(plugin_id)
        status.warnings = list(source.warnings) if source is not None else []
        if running and plugin_id in self.engine.faulty:  # a hook ignored its cancellation: its hooks are off
            status.state, status.reason = "error", self.engine.faulty[plugin_id]
        status.fault = self._faults.describe(plugin_id)
        return status

    def statuses(self) -> list[PluginStatus]:
        """Every known plugin's status, sorted by plugin id."""
        return [self._current(self._status[pid]) for pid in sorted(self._status)]

    def hook_chains(self) -> dict[str, list[dict[str, Any]]]:
        """Per event, in pipeline order, the resolved hook order: plugin id, function, priority and deadline."""
        return {event: [e.describe() for e in self.engine.chain(event)] for event in self.engine.events()}

    async def dispatch_loaded(self, plugin_id: str | None = None) -> None:
        """Fire the `loaded` event (after start-up with None, or for one plugin enabled at run time)."""
        await self.engine.dispatch(EventType.LOADED, KiraLifecycleEvent(plugin_id))


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
