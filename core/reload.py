"""Hot reload (`--reload`): watch the plugin folders and reload a plugin whose files changed, alone; retry a plugin
that failed to load when its files change; load a plugin folder that appears.

A reload waits until no turn is in flight (at most `settle_timeout`), so a turn that started on the old code
finishes on it. A change that does not load (a syntax error saved) leaves the previous version running. Each outcome
is logged once, and kept in `events` for the web console: whether the new code is in effect.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from watchfiles import awatch

from core.app import HookChat
from core.utils.tasks import TaskOwner

__all__ = ["PluginReloader", "ReloadEvent"]

_log = logging.getLogger("hookchat.reload")
_IGNORED_PARTS = frozenset({"__pycache__", ".git", ".pytest_cache", ".mypy_cache"})


@dataclass(frozen=True)
class ReloadEvent:
    """One reload: which plugin, when, whether the new code is in effect, and why not (`state` is `loaded`
    when the previous version kept running)."""

    plugin_id: str
    at: float
    ok: bool
    state: str
    reason: str | None = None


class PluginReloader:
    """Reloads `app`'s plugins when their folders change. `start()` watches (a task it owns); `stop()` ends it.

    `apply(paths)` does one round by hand (what the watcher calls): tests use it to reload without waiting.
    """

    def __init__(self, app: HookChat, *, settle_timeout: float = 30.0, debounce_ms: int = 200) -> None:
        self.app = app
        self.settle_timeout = settle_timeout
        self.debounce_ms = debounce_ms
        self.events: deque[ReloadEvent] = deque(maxlen=200)
        self._tasks = TaskOwner("the plugin reloader")
        self._stop = asyncio.Event()
        self._ready = asyncio.Event()
        self._lock = asyncio.Lock()

    @property
    def roots(self) -> list[Path]:
        """The folders watched: the configured plugin directories that exist."""
        return [Path(p) for p in self.app.plugins.plugin_dirs if Path(p).is_dir()]

    async def start(self) -> None:
        """Start watching (nothing to do when no plugin directory exists)."""
        if not self.roots:
            _log.warning("--reload: none of the plugin directories exists; nothing to watch")
            return
        self._stop.clear()
        self._ready.clear()
        self._tasks.spawn(self._watch(), name="watch")
        try:
            await asyncio.wait_for(self._ready.wait(), timeout=10)  # a change made from now on is seen
        except TimeoutError:
            _log.warning("--reload: the file watcher is slow to start; early changes may be missed")
        _log.info("--reload: watching %s", ", ".join(map(str, self.roots)))

    async def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        await self._tasks.aclose()

    async def _watch(self) -> None:
        # yield_on_timeout: the first (empty) round says the watcher is set up; later empty rounds are skipped.
        async for changes in awatch(
            *self.roots,
            stop_event=self._stop,
            debounce=self.debounce_ms,
            recursive=True,
            yield_on_timeout=True,
            rust_timeout=500,
        ):
            self._ready.set()
            if not changes:
                continue
            try:
                await self.apply(Path(path) for _, path in changes)
            except Exception:
                _log.exception("--reload: a reload round failed")

    def _folder_of(self, path: Path) -> Path | None:
        """The plugin folder (a direct child of a plugin directory) that `path` lies in."""
        if _IGNORED_PARTS.intersection(path.parts) or path.suffix in (".pyc", ".swp", ".tmp"):
            return None
        for root in self.roots:
            try:
                relative = path.resolve().relative_to(root.resolve())
            except ValueError:
                continue
            if relative.parts:
                return root.resolve() / relative.parts[0]
        return None

    def _plugin_of(self, folder: Path) -> str | None:
        for status in self.app.plugins.statuses():
            source = self.app.plugins.source(status.plugin_id)
            known = source.path if source is not None else (Path(status.origin) if status.origin else None)
            if known is not None and Path(known).resolve() == folder:
                return status.plugin_id
        return None

    async def apply(self, paths: Iterable[Path | str]) -> list[ReloadEvent]:
        """Reload the plugins whose folders hold `paths` (changed files); returns what happened."""
        folders = {f for f in (self._folder_of(Path(p)) for p in paths) if f is not None}
        if not folders:
            return []
        async with self._lock:
            await self._settle()
            done = []
            for folder in sorted(folders):
                done.append(await self._reload_folder(folder))
            return [e for e in done if e is not None]

    async def _settle(self) -> None:
        """Wait (bounded) until no turn is in flight, so turns that began on the old code finish on it."""
        deadline = time.monotonic() + self.settle_timeout
        # a poll: the scheduler offers no "idle" event (its join() also waits for overflow notices)
        while self.app.scheduler.busy_sessions() and time.monotonic() < deadline:  # noqa: ASYNC110 - see above
            await asyncio.sleep(0.05)

    async def _reload_folder(self, folder: Path) -> ReloadEvent | None:
        loader = self.app.plugins
        plugin_id = self._plugin_of(folder)
        if plugin_id is None:
            if not (folder / "manifest.json").is_file():
                return None
            source = loader.add_folder(folder)
            if source is None:
                plugin_id = folder.name
                status = loader.status(plugin_id)
            else:
                plugin_id = source.plugin_id
                status = await loader.load(plugin_id)
        else:
            current = loader.status(plugin_id)
            if current is not None and current.state == "disabled":
                return None  # the operator disabled it; a file change does not enable it
            status = await loader.reload(plugin_id)
        ok = status is not None and status.state == "loaded" and not status.previous_version
        event = ReloadEvent(
            plugin_id, time.time(), ok, status.state if status else "unknown", status.reason if status else None
        )
        self.events.append(event)
        if ok:
            await loader.dispatch_loaded(plugin_id)
            _log.info("--reload: plugin %r reloaded from %s: the new code is in effect", plugin_id, folder)
        # A failure is not logged here: the plugin manager logged it once, with its reason (and whether the
        # previous version keeps running); it is retried on the next change.
        return event
