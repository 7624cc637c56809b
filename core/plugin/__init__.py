"""The plugin API: hooks (`on`, `Priority`), tool and tag declarations (`register`), `BasePlugin`,
`PluginContext`, and the machinery that loads plugins and dispatches events to them.

Everything a plugin author imports lives here; the modules starting with `_` are internals with one job each.
"""

from core.plugin import _signals as signals
from core.plugin._base import BasePlugin, Manifest, PluginContext
from core.plugin._engine import HookEngine, HookEntry, HookRegistrationError, HookTimeout
from core.plugin._events import EventType, Priority
from core.plugin._log import get_logger, logger
from core.plugin._manager import (
    ENTRY_POINT_GROUP,
    PluginConfigError,
    PluginLoadError,
    PluginManager,
    PluginSource,
    PluginStatus,
)
from core.plugin._markers import on, register, register_tool
from core.plugin._registry import OwnedRegistry

__all__ = [
    "BasePlugin",
    "ENTRY_POINT_GROUP",
    "EventType",
    "HookEngine",
    "HookEntry",
    "HookRegistrationError",
    "HookTimeout",
    "Manifest",
    "OwnedRegistry",
    "PluginConfigError",
    "PluginContext",
    "PluginLoadError",
    "PluginManager",
    "PluginSource",
    "PluginStatus",
    "Priority",
    "get_logger",
    "logger",
    "on",
    "register",
    "register_tool",
    "signals",
]
