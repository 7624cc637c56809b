"""Calls between plugins (`self.plugins`): list the plugins the manager knows, and call another plugin's entry.

Every method returns a `Result`; a missing plugin or entry, a failure or a timeout is an `Err(SdkError)`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.services._entries import EntryRegistry
from core.services._host import PluginHandle
from core.services._result import Err, Ok, Result, SdkError

__all__ = ["Plugins"]


class Plugins:
    """The cross-plugin helper of one plugin (`caller`), over the plugin manager that loaded it. `entries_of` gives
    a loaded plugin instance's entries (its services make them, and the services make this helper)."""

    def __init__(
        self, ctx: PluginHandle, entries_of: Callable[[Any], EntryRegistry]
    ) -> None:  # Any: a plugin instance is of any class
        self.ctx = ctx
        self._entries_of = entries_of

    @property
    def _manager(self) -> Any:
        return self.ctx.manager

    def _describe(self, plugin_id: str) -> dict[str, Any]:
        status = self._manager.status(plugin_id)
        instance = self._manager.get_plugin(plugin_id)
        manifest = instance.ctx.manifest if instance is not None else None
        return {
            "plugin_id": plugin_id,
            "state": status.state if status else "unknown",
            "enabled": status is not None and status.state == "loaded",
            "version": status.version if status else "",
            "display_name": manifest.display_name if manifest else "",
            "description": manifest.description if manifest else "",
        }

    def _ids(self, enabled: bool | None) -> list[str]:
        ids = [s.plugin_id for s in self._manager.statuses()]
        if enabled is None:
            return ids
        loaded = set(self._manager.loaded_ids())
        return [pid for pid in ids if (pid in loaded) == enabled]

    async def list(self, enabled: bool | None = None) -> Result[list[dict[str, Any]], SdkError]:
        """`Ok` of every known plugin (`enabled=True`: only loaded ones; False: only the others), by id."""
        if self._manager is None:
            return Err(SdkError("this plugin is not loaded by a plugin manager", code="not_attached"))
        return Ok([self._describe(pid) for pid in self._ids(enabled)])

    async def list_ids(self, enabled: bool | None = None) -> Result[list[str], SdkError]:
        """`Ok` of the ids of every known plugin (filtered like `list`)."""
        if self._manager is None:
            return Err(SdkError("this plugin is not loaded by a plugin manager", code="not_attached"))
        return Ok(self._ids(enabled))

    async def exists(self, plugin_id: str) -> Result[bool, SdkError]:
        """`Ok(True)` when the manager knows `plugin_id` (loaded or not)."""
        if self._manager is None:
            return Err(SdkError("this plugin is not loaded by a plugin manager", code="not_attached"))
        return Ok(self._manager.status(plugin_id) is not None)

    async def require_enabled(self, plugin_id: str) -> Result[dict[str, Any], SdkError]:
        """`Ok` of the plugin's description when it is loaded, else `Err` saying why not."""
        if self._manager is None:
            return Err(SdkError("this plugin is not loaded by a plugin manager", code="not_attached"))
        if self._manager.get_plugin(plugin_id) is None:
            status = self._manager.status(plugin_id)
            why = (
                f"is {status.state}" + (f" ({status.reason})" if status and status.reason else "")
                if status
                else "is not installed"
            )
            return Err(SdkError(f"plugin {plugin_id!r} {why}", code="plugin_unavailable"))
        return Ok(self._describe(plugin_id))

    async def call_entry(
        self, target: str, args: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Result[Any, SdkError]:
        """Call entry `"<plugin_id>:<entry_id>"` with `args` (keyword arguments of its handler)."""
        plugin_id, sep, entry_id = target.partition(":")
        if not sep or not plugin_id or not entry_id:
            return Err(SdkError(f"call_entry needs '<plugin_id>:<entry_id>', not {target!r}", code="invalid_argument"))
        if args is not None and not isinstance(args, dict):
            return Err(
                SdkError(f"call_entry arguments must be a dict, not {type(args).__name__}", code="invalid_argument")
            )
        required = await self.require_enabled(plugin_id)
        if isinstance(required, Err):
            return required
        instance = self._manager.get_plugin(plugin_id)
        return await self._entries_of(instance).call(entry_id, args, timeout)

    async def call_entry_json(
        self, target: str, args: dict[str, Any] | None = None, *, timeout: float | None = None
    ) -> Result[dict[str, Any], SdkError]:
        """Like `call_entry`, but an answer that is not a JSON object is an `Err`."""
        result = await self.call_entry(target, args, timeout=timeout)
        if isinstance(result, Ok) and not isinstance(result.value, dict):
            return Err(
                SdkError(
                    f"entry {target} answered {type(result.value).__name__}, not a JSON object", code="invalid_response"
                )
            )
        return result
