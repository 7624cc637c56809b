"""Where plugins come from: a plugin's `Manifest`, the `PluginSource` of each plugin id (a folder with a manifest,
an installed package's entry point, or a class handed over in-process), and `PluginCatalog`, which finds them and
keeps one source per id. No plugin code is imported here."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from core.builtins import builtin_plugins_dir
from core.plugin._ids import check_plugin_id
from core.utils import entry_points as _entry_points
from core.utils.log import logger

if TYPE_CHECKING:
    import importlib.metadata

__all__ = [
    "ENTRY_POINT_GROUP",
    "MANIFEST_KEYS",
    "Manifest",
    "PluginCatalog",
    "PluginLoadError",
    "PluginSource",
    "ScanFailure",
    "read_folder",
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


class PluginLoadError(Exception):
    """A plugin could not be loaded; the message is the reason shown in the plugin status."""


class Manifest(BaseModel):
    """`manifest.json` of a plugin. `core_version` is a PEP 440 specifier checked against the framework version."""

    model_config = ConfigDict(extra="allow")

    plugin_id: str
    display_name: str = ""
    version: str = "0.0.0"
    author: str = ""
    description: str = ""
    core_version: str = ""

    @field_validator("plugin_id")
    @classmethod
    def _usable_id(cls, value: str) -> str:
        return check_plugin_id(value)


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


@dataclass(frozen=True)
class ScanFailure:
    """A folder that looks like a plugin but cannot be one: the id it would have, why not, and where it is."""

    plugin_id: str
    reason: str
    origin: str


class PluginCatalog:
    """One source per plugin id. A second source of a known id is refused with a warning on the first, except that
    any plugin replaces a built-in one (`PluginSource.builtin`) of its id, and a built-in never replaces another."""

    def __init__(self) -> None:
        self._sources: dict[str, PluginSource] = {}

    def __contains__(self, plugin_id: object) -> bool:
        return plugin_id in self._sources

    def get(self, plugin_id: str) -> PluginSource | None:
        """The source of `plugin_id`, or None when unknown."""
        return self._sources.get(plugin_id)

    def ids(self) -> list[str]:
        """Every known plugin id, sorted (the load order)."""
        return sorted(self._sources)

    def put(self, source: PluginSource) -> None:
        """Make `source` the one of its id, unconditionally (a reload read the folder afresh)."""
        self._sources[source.plugin_id] = source

    def forget(self, plugin_id: str) -> None:
        """Forget `plugin_id`'s source (an unloaded plugin)."""
        self._sources.pop(plugin_id, None)

    def add(self, source: PluginSource) -> str | None:
        """Offer `source`: None when it was refused; `"replaced"` when it replaced a built-in plugin of its id;
        `"new"` otherwise (a new id, or the same origin read again)."""
        pid = source.plugin_id
        known = self._sources.get(pid)
        outcome = "new"
        if known is not None and known.origin != source.origin:
            if source.builtin:
                return None  # the operator's plugin of this id replaces the built-in one
            if not known.builtin:
                problem = (
                    f"duplicate plugin id {pid!r}: {source.origin} was refused, because {known.origin} "
                    'has the same id; rename one of them (manifest.json "plugin_id")'
                )
                logger.warning("%s", problem)
                known.warnings.append(problem)
                return None
            logger.info("plugin %r from %s replaces the built-in one", pid, source.origin)
            outcome = "replaced"
        self._sources[pid] = source
        return outcome

    @staticmethod
    def scan(
        plugin_dirs: Iterable[Path], *, entry_points: bool, builtins: Iterable[str]
    ) -> Iterator[PluginSource | ScanFailure]:
        """What the plugin directories, the installed entry points and the named built-in plugins hold, in that
        order: a source per plugin, a failure per folder that looks like a plugin but cannot be read."""
        for root in plugin_dirs:
            if not root.is_dir():
                continue
            for folder in sorted(p for p in root.iterdir() if p.is_dir()):
                if not (folder / "manifest.json").is_file():
                    entry = next((m for m in ("main.py", "plugin.py") if (folder / m).is_file()), None)
                    if entry is not None:  # it looks like a plugin: say why it is not loaded
                        reason = _NO_MANIFEST.format(folder=folder, entry=entry, id=folder.name)
                        yield ScanFailure(folder.name, reason, str(folder))
                    continue
                try:
                    yield read_folder(folder)
                except PluginLoadError as exc:
                    yield ScanFailure(folder.name, str(exc), str(folder))
        if entry_points:
            for ep in _entry_points.entry_points(group=ENTRY_POINT_GROUP):
                yield PluginSource(ep.name, Manifest(plugin_id=ep.name), entry_point=ep)
        builtins = tuple(builtins)
        root = builtin_plugins_dir() if builtins else Path()
        for plugin_id in builtins:
            try:
                source = read_folder(root / plugin_id)
            except PluginLoadError as exc:  # a broken installation: say so, load the rest
                yield ScanFailure(plugin_id, str(exc), str(root / plugin_id))
                continue
            source.builtin = True
            yield source


_NO_MANIFEST = (
    "plugin folder {folder} has {entry} but no manifest.json, so it was not loaded: add "
    '{folder}/manifest.json, for example {{"plugin_id": "{id}", "display_name": "{id}", "version": '
    '"0.1.0"}} (docs/guide.md)'
)


def _read_json(path: Path, what: str) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PluginLoadError(f"cannot read {what} {path}: {exc}") from exc


def read_folder(folder: Path) -> PluginSource:
    """Read a plugin folder's manifest and schema (no code is imported); `PluginLoadError` says what is wrong."""
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
