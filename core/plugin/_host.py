"""The seams inside the plugin layer: what a plugin's context (and KiraAI's facades over it) may use of the loader
that loaded the plugin (`PluginManagerView`), and what the running application gives KiraAI-style plugins
(`KiraRuntime`). `PluginLoader` and `core.kira` implement them; contexts never reach further into either."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from core.plugin._engine import HookEngine
from core.plugin._source import PluginSource
from core.plugin._status import PluginStatus
from core.services import PluginHost
from core.tag import MediaPolicy
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import BaseTool

__all__ = ["KiraRuntime", "PluginManagerView"]


class KiraRuntime(Protocol):
    """What a running application gives KiraAI-style plugins: the managers and the config in KiraAI's shape."""

    @property
    def config(self) -> Mapping[str, Any]:
        """The application's config in KiraAI's shape (`bot_config`, `locale`, `models`, `providers`, ...)."""
        ...

    def manager(self, name: str) -> object:
        """The facade for one of `core.plugin._kira.MANAGER_NAMES`."""
        ...


class PluginManagerView(Protocol):
    """What a plugin's context may use of the loader: the engine (custom events), the tool registry, what tags may
    send, the app and the KiraAI runtime, and the other plugins (looked up, listed, enabled, configured)."""

    engine: HookEngine
    tools: OwnedRegistry[BaseTool]
    plugin_config: dict[str, dict[str, Any]]
    media_roots: list[Path]
    private_paths: list[Path]
    media_policy: MediaPolicy
    app: PluginHost | None
    kira: KiraRuntime | None

    def source(self, plugin_id: str) -> PluginSource | None:
        """Where the plugin comes from, or None when unknown."""
        ...

    def get_plugin(self, plugin_id: str) -> Any:
        """The loaded plugin instance, or None (plugins are any class: their type is theirs)."""
        ...

    def loaded_ids(self) -> list[str]:
        """The ids of loaded plugins."""
        ...

    def status(self, plugin_id: str) -> PluginStatus | None:
        """One plugin's status, or None when unknown."""
        ...

    def statuses(self) -> list[PluginStatus]:
        """Every known plugin's status."""
        ...

    async def enable(self, plugin_id: str) -> PluginStatus:
        """Load a disabled (or failed) plugin."""
        ...

    async def disable(self, plugin_id: str) -> None:
        """Stop a plugin but keep it known."""
        ...

    async def configure(self, plugin_id: str, values: dict[str, Any]) -> PluginStatus:
        """Make `values` the plugin's settings (checked against its schema) and reload it if loaded."""
        ...
