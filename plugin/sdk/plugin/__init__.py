"""The plugin SDK surface of seeds 000 and 002 (`from plugin.sdk.plugin import ...`), as a thin layer over hookchat:
`NekoPluginBase` is a `core.plugin.BasePlugin`, the decorators and services are `core.services`. Names that only
make sense inside the original desktop host stay importable and say so when used; see docs/sdk.md.
"""

from core.services import (
    Err,
    Ok,
    PluginConfig,
    Plugins,
    PluginStore,
    Result,
    SdkError,
    TransportError,
    get_plugin_logger,
    lifecycle,
    plugin_entry,
    timer_interval,
    unwrap,
    unwrap_or,
)
from plugin.sdk.plugin.base import NekoPluginBase, PluginMeta
from plugin.sdk.plugin.decorators import (
    EntryKind,
    after_entry,
    around_entry,
    before_entry,
    custom_event,
    hook,
    message,
    neko_plugin,
    on_event,
    plugin,
    quick_action,
    replace_entry,
)
from plugin.sdk.plugin.extras import (
    OsActivitySnapshot,
    PluginI18n,
    PluginRouter,
    PluginSettings,
    SettingsField,
    get_os_activity_snapshot,
    tr,
    ui,
)
from plugin.sdk.plugin.host import SdkBus, SystemInfo
from plugin.sdk.plugin.llm_tool import LlmToolMeta, llm_tool

__all__ = [
    # Base
    "NekoPluginBase",
    "PluginMeta",
    # Decorators
    "EntryKind",
    "neko_plugin",
    "plugin_entry",
    "lifecycle",
    "timer_interval",
    "message",
    "on_event",
    "custom_event",
    "hook",
    "before_entry",
    "after_entry",
    "around_entry",
    "replace_entry",
    "quick_action",
    "plugin",
    "ui",
    # LLM tools and activity
    "llm_tool",
    "LlmToolMeta",
    "OsActivitySnapshot",
    "get_os_activity_snapshot",
    # Plugin-local i18n and settings
    "PluginI18n",
    "tr",
    "PluginSettings",
    "SettingsField",
    # Result types
    "Ok",
    "Err",
    "Result",
    "unwrap",
    "unwrap_or",
    # Runtime helpers
    "Plugins",
    "PluginRouter",
    "PluginConfig",
    "PluginStore",
    "SystemInfo",
    "SdkBus",
    # Errors
    "SdkError",
    "TransportError",
    # Logging
    "get_plugin_logger",
]
