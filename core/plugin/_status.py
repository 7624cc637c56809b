"""What the loader says about each plugin: its `PluginStatus`, and `FaultLog`, the plugins whose hook ignored its
cancellation, kept in the data directory so that a later run (and `hookchat plugins`) still shows it."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, TypedDict

from core.utils.log import logger

__all__ = ["Fault", "FaultLog", "PluginStatus", "State"]

State = Literal["discovered", "loaded", "disabled", "error"]


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


class Fault(TypedDict):
    """One recorded fault: why, and when (`time.time()`)."""

    reason: str
    at: float


class FaultLog:
    """The faults of plugins, by plugin id, as `<data_dir>/plugin_faults.json` has them. A rare event and a few
    hundred bytes, so each change is written at once rather than through a worker thread."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._faults: dict[str, Fault] = {}

    @property
    def file(self) -> Path:
        """Where the faults are kept."""
        return self.data_dir / "plugin_faults.json"

    def __contains__(self, plugin_id: object) -> bool:
        return plugin_id in self._faults

    def record(self, plugin_id: str, reason: str) -> None:
        """Remember that `plugin_id` is faulty, and why."""
        self._faults[plugin_id] = {"reason": reason, "at": time.time()}
        self._write()

    def forget(self, plugin_id: str) -> None:
        """Forget `plugin_id`'s fault (a new version of it was loaded)."""
        if self._faults.pop(plugin_id, None) is not None:
            self._write()

    def describe(self, plugin_id: str) -> str | None:
        """`reason (YYYY-mm-dd HH:MM:SS)` of `plugin_id`'s fault, None when it has none."""
        fault = self._faults.get(plugin_id)
        if fault is None:
            return None
        return f"{fault['reason']} ({time.strftime('%Y-%m-%d %H:%M:%S', time.localtime(fault['at']))})"

    def read(self, folders: Mapping[str, Path | None]) -> None:
        """Take up the faults recorded by earlier runs of the plugins in `folders` (plugin id to its folder, None
        for a plugin without one); a fault older than a change to its folder's files is dropped (fixed, we hope),
        and so is one of a plugin not in `folders`."""
        try:
            raw = json.loads(self.file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            self._faults = {}
            return
        faults: dict[str, Fault] = {}
        for plugin_id, fault in raw.items() if isinstance(raw, dict) else ():
            if not isinstance(fault, dict) or not isinstance(fault.get("at"), int | float) or plugin_id not in folders:
                continue
            folder = folders[plugin_id]
            if folder is not None and _newest_change(folder) > fault["at"]:
                continue
            faults[plugin_id] = {"reason": str(fault.get("reason", "faulty")), "at": float(fault["at"])}
        self._faults = faults

    def _write(self) -> None:
        try:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            self.file.write_text(json.dumps(self._faults, indent=1), encoding="utf-8")
        except OSError as exc:
            logger.warning("cannot record plugin faults in %s: %s", self.file, exc)


def _newest_change(folder: Path) -> float:
    """The newest modification time of the files in a plugin folder (its caches left out)."""
    try:
        return max(
            (p.stat().st_mtime for p in folder.rglob("*") if "__pycache__" not in p.parts and p.is_file()), default=0.0
        )
    except OSError:
        return 0.0
