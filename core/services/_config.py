"""A plugin's configuration at run time (`self.config`): reads by dotted path, and updates validated against the
plugin's `schema.json`, applied in place (so `self.cfg` sees them) and saved to its runtime config file.
"""

from __future__ import annotations

import copy
import json
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any

import anyio

from core.services._host import PluginHandle
from core.services._result import SdkError
from core.services._schema import PluginConfigError, validate_config

__all__ = ["PluginConfig", "ConfigValidationError", "deep_merge", "read_runtime_config"]

_MISSING = object()


class ConfigValidationError(SdkError):
    """A config update does not match the plugin's schema; the message names the field. Nothing was changed."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="config_invalid")


def deep_merge(base: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`base` with `patch` applied: nested dicts are merged key by key, anything else is replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in patch.items():
        if isinstance(merged.get(key), dict) and isinstance(value, Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def _lookup(data: Any, path: str) -> Any:
    if path == "":
        return data
    current = data
    for part in path.split("."):
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


def read_runtime_config(path: Path) -> dict[str, Any]:
    """The saved runtime overrides in `path` ({} when there are none). Blocking: call it in a worker thread."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SdkError(f"cannot read runtime config {path}: {exc}", code="config_unreadable") from exc
    return data if isinstance(data, dict) else {}


def _write_json(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    os.replace(tmp, path)


class PluginConfig:
    """Reads and updates one plugin's configuration (`ctx.config`, the dict the plugin got as `cfg`).

    Reads return the value (or `default`); `get_int`/`get_float`/`get_str`/`get_bool` raise `SdkError` for a value
    of another type. `update(patch)` deep-merges `patch`, validates the result against `schema.json` (defaults
    included), applies it in place, saves the accumulated overrides to `runtime_config_path` and returns the new
    config; an invalid update raises `ConfigValidationError` and changes nothing. Saved overrides are applied
    again when the plugin next loads (see docs/sdk.md).
    """

    def __init__(
        self,
        ctx: PluginHandle,
        runtime_config_path: Path,
        *,
        on_change: Callable[[dict[str, Any]], Awaitable[None]] | None = None,
    ) -> None:
        self.ctx = ctx
        self.runtime_config_path = Path(runtime_config_path)
        self._on_change = on_change
        self._lock: anyio.Lock | None = None

    @property
    def _data(self) -> dict[str, Any]:
        return self.ctx.config

    async def dump(self) -> dict[str, Any]:
        """A copy of the whole current config."""
        return copy.deepcopy(self._data)

    async def get(self, path: str, default: Any = None) -> Any:
        """The value at dotted `path` (`"a.b"` is `config["a"]["b"]`), or `default` when it is not set."""
        value = _lookup(self._data, path)
        return default if value is _MISSING else copy.deepcopy(value)

    async def require(self, path: str) -> Any:
        """The value at `path`; raises `SdkError` when it is not set."""
        value = _lookup(self._data, path)
        if value is _MISSING:
            raise SdkError(f"plugin {self.ctx.plugin_id!r}: config value {path!r} is not set", code="config_missing")
        return copy.deepcopy(value)

    async def _typed(self, path: str, default: Any, kinds: tuple[type, ...], what: str) -> Any:
        value = _lookup(self._data, path)
        if value is _MISSING or value is None:
            return default
        if isinstance(value, bool) and bool not in kinds:
            value = _MISSING
        if value is _MISSING or not isinstance(value, kinds):
            raise SdkError(f"plugin {self.ctx.plugin_id!r}: config value {path!r} is not {what}", code="config_type")
        return value

    async def get_int(self, path: str, default: int | None = None) -> int | None:
        """The integer at `path`, or `default` when it is not set."""
        return await self._typed(path, default, (int,), "an integer")

    async def get_float(self, path: str, default: float | None = None) -> float | None:
        """The number at `path` as a float, or `default` when it is not set."""
        value = await self._typed(path, default, (int, float), "a number")
        return float(value) if value is not None else None

    async def get_str(self, path: str, default: str | None = None) -> str | None:
        """The string at `path`, or `default` when it is not set."""
        return await self._typed(path, default, (str,), "a string")

    async def get_bool(self, path: str, default: bool | None = None) -> bool | None:
        """The boolean at `path`, or `default` when it is not set."""
        return await self._typed(path, default, (bool,), "a boolean")

    async def set(self, path: str, value: Any) -> dict[str, Any]:
        """Set the value at dotted `path` (an `update` of one key)."""
        if not path:
            raise SdkError("set() needs a non-empty dotted path", code="invalid_argument")
        patch: dict[str, Any] = {}
        node = patch
        parts = path.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        node[parts[-1]] = value
        return await self.update(patch)

    async def update(self, patch: Mapping[str, Any]) -> dict[str, Any]:
        """Deep-merge `patch`, validate, apply in place, save; returns a copy of the new config."""
        if not isinstance(patch, Mapping):
            raise SdkError(f"update() needs a dict, not {type(patch).__name__}", code="invalid_argument")
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:
            schema = await anyio.to_thread.run_sync(self._read_schema)
            merged = deep_merge(self._data, patch)
            validated = _validate(self.ctx.plugin_id, schema, merged)
            saved = await anyio.to_thread.run_sync(read_runtime_config, self.runtime_config_path)
            await anyio.to_thread.run_sync(_write_json, self.runtime_config_path, deep_merge(saved, patch))
            self._data.clear()
            self._data.update(validated)
            new = copy.deepcopy(validated)
        if self._on_change is not None:
            await self._on_change(copy.deepcopy(new))
        return new

    async def reload_runtime_overrides(self) -> dict[str, Any]:
        """Apply the overrides saved by earlier `update` calls to the current config (validated); returns it."""
        saved = await anyio.to_thread.run_sync(read_runtime_config, self.runtime_config_path)
        if saved:
            schema = await anyio.to_thread.run_sync(self._read_schema)
            validated = _validate(self.ctx.plugin_id, schema, deep_merge(self._data, saved))
            self._data.clear()
            self._data.update(validated)
        return copy.deepcopy(self._data)

    def _read_schema(self) -> dict[str, Any] | None:
        plugin_dir = self.ctx.plugin_dir
        if plugin_dir is None:
            return None
        schema_file = Path(plugin_dir) / "schema.json"
        if not schema_file.is_file():
            return None
        try:
            schema = json.loads(schema_file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SdkError(f"cannot read {schema_file}: {exc}", code="config_unreadable") from exc
        return schema if isinstance(schema, dict) else None


def _validate(plugin_id: str, schema: dict[str, Any] | None, values: dict[str, Any]) -> dict[str, Any]:
    try:
        return validate_config(plugin_id, schema, values)
    except PluginConfigError as exc:
        raise ConfigValidationError(str(exc)) from None
