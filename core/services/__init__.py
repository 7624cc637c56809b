"""Plugin services (seeds 000 and 002): the one tool registration path, the picture budget, config, key-value store,
SQLite database, files, entries, timers, cross-plugin calls and proactive messages. Plugins reach them through
`PluginServicesMixin` (a base of `BasePlugin`); `plugin.sdk` is a thin layer over this package. The services see a
plugin, the loader and the app only through the protocols of `_host.py` (`PluginHandle`, `PluginDirectory`,
`PluginHost`), so this package sits below `core.plugin` and never imports it."""

from core.services._config import ConfigValidationError, PluginConfig
from core.services._db import DbRows, DbSession, PluginDatabase
from core.services._declarations import (
    LIFECYCLE_ATTR,
    LLM_TOOL_ATTR,
    EntryHookMeta,
    EntryMeta,
    LifecycleMeta,
    LlmToolMeta,
    TimerMeta,
    declared,
    declared_entries,
    entry_hook,
    lifecycle,
    llm_tool,
    plugin_entry,
    timer_interval,
)
from core.services._entries import Entry, EntryRegistry, TimerRunner
from core.services._host import PluginDirectory, PluginHandle, PluginHost, PluginStatusView
from core.services._mixin import PluginContextServicesMixin, PluginServicesMixin
from core.services._pictures import MAX_INLINE_PICTURE, PICTURE_BUDGET, apply_picture_budget, reencode_picture
from core.services._plugins import Plugins
from core.services._push import PUSH_REASONS, PushMessageError, PushReceipt, PushService
from core.services._result import Err, Ok, Result, SdkError, TransportError, UnwrapError, unwrap, unwrap_or
from core.services._schema import PluginConfigError, validate_config
from core.services._services import PluginServices, bind_plugin, clear_remote_tools, services_for
from core.services._sqlite import SqliteWorker, StorageClosedError
from core.services._store import PluginStore, PluginStoreLike
from core.services._tools import (
    add_function_tool,
    check_role,
    current_tool_call,
    plugin_tools,
    remote_owner,
    remove_function_tool,
    visible_tools,
)
from core.utils.log import PluginLogger, format_braces, get_plugin_logger

__all__ = [
    "LIFECYCLE_ATTR",
    "LLM_TOOL_ATTR",
    "PluginConfigError",
    "PluginDirectory",
    "PluginHandle",
    "PluginHost",
    "PluginStatusView",
    "check_role",
    "validate_config",
    "ConfigValidationError",
    "DbRows",
    "DbSession",
    "Entry",
    "EntryHookMeta",
    "EntryMeta",
    "EntryRegistry",
    "Err",
    "LifecycleMeta",
    "LlmToolMeta",
    "MAX_INLINE_PICTURE",
    "Ok",
    "PICTURE_BUDGET",
    "PUSH_REASONS",
    "PluginConfig",
    "PluginContextServicesMixin",
    "PluginDatabase",
    "PluginLogger",
    "PluginServices",
    "PluginServicesMixin",
    "PluginStore",
    "PluginStoreLike",
    "Plugins",
    "PushMessageError",
    "PushService",
    "PushReceipt",
    "Result",
    "SdkError",
    "SqliteWorker",
    "StorageClosedError",
    "TimerMeta",
    "TimerRunner",
    "TransportError",
    "UnwrapError",
    "add_function_tool",
    "apply_picture_budget",
    "bind_plugin",
    "clear_remote_tools",
    "current_tool_call",
    "declared",
    "declared_entries",
    "entry_hook",
    "format_braces",
    "get_plugin_logger",
    "lifecycle",
    "llm_tool",
    "plugin_entry",
    "plugin_tools",
    "reencode_picture",
    "remote_owner",
    "remove_function_tool",
    "services_for",
    "timer_interval",
    "unwrap",
    "unwrap_or",
    "visible_tools",
]
