"""The plugin API: hooks (`on`, `Priority`), tool and tag declarations (`register`), `BasePlugin`,
`PluginContext`, and the machinery that loads plugins (`PluginLoader`) and dispatches events to them
(`HookEngine`).

Everything a plugin author imports lives here; the modules starting with `_` are internals with one job each.
"""

from typing import TYPE_CHECKING

from core.plugin._base import BasePlugin, PluginContext
from core.plugin._decorators import on, register, register_tool
from core.plugin._engine import HookEngine, HookEntry, HookRegistrationError, HookTimeout
from core.plugin._events import EventType, Priority, UnknownEventError, custom_event_name, events_table, priority_name
from core.plugin._host import KiraRuntime
from core.plugin._ids import check_plugin_id, module_name_for
from core.plugin._kira import (
    KiraAdapter,
    KiraAdapterManager,
    KiraEventBus,
    KiraMessageProcessor,
    KiraSessionBuffer,
    KiraSessionBuffers,
    NotSupportedHere,
    PluginConfig,
    wants_whole_output,
)
from core.plugin._loader import (
    ENTRY_POINT_GROUP,
    KIRA_API_VERSION,
    PluginLoader,
    PluginLoadError,
    PluginSource,
    PluginStatus,
)
from core.plugin._source import Manifest
from core.services import PluginConfigError
from core.utils import signals
from core.utils.lazy import lazy_names
from core.utils.log import get_logger, logger
from core.utils.registry import OwnedRegistry

# KiraAI's web declarations (pages, endpoints, widgets for the web console) are imported on first use (PEP 562):
# only a plugin that declares one and the web console use them, and their module is 0.7% of a `hookchat plugins`
# (docs/performance.md).
_LAZY: dict[str, str] = dict.fromkeys(
    ("PageMenu", "PluginPage", "PluginPageSource", "WebDeclaration", "web_declarations"), "core.plugin._web"
)

if TYPE_CHECKING:  # what the checker sees of the lazy names
    from core.plugin._web import PageMenu, PluginPage, PluginPageSource, WebDeclaration, web_declarations


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "KiraAdapter",
    "KiraAdapterManager",
    "KiraEventBus",
    "KiraMessageProcessor",
    "KiraSessionBuffer",
    "KiraSessionBuffers",
    "BasePlugin",
    "ENTRY_POINT_GROUP",
    "EventType",
    "HookEngine",
    "HookEntry",
    "HookRegistrationError",
    "HookTimeout",
    "KIRA_API_VERSION",
    "KiraRuntime",
    "NotSupportedHere",
    "PluginConfig",
    "check_plugin_id",
    "custom_event_name",
    "events_table",
    "module_name_for",
    "Manifest",
    "OwnedRegistry",
    "PageMenu",
    "PluginPage",
    "PluginPageSource",
    "WebDeclaration",
    "web_declarations",
    "PluginConfigError",
    "PluginContext",
    "PluginLoadError",
    "PluginLoader",
    "PluginSource",
    "PluginStatus",
    "Priority",
    "get_logger",
    "logger",
    "on",
    "priority_name",
    "register",
    "register_tool",
    "signals",
    "UnknownEventError",
    "wants_whole_output",
]
