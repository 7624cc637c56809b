"""KiraAI's side of the plugin context: `ctx.config` answering both the plugin's settings and the application's
config, the manager objects (`ctx.adapter_mgr`, `ctx.session_mgr`, ...) and the context methods KiraAI documents
(`get_llm_client`, `get_plugin_inst`, `get_buffer`, `publish_notice`, ...).

The managers themselves are facades the running application provides (`core.kira` implements `KiraRuntime`);
without an application each one answers every call with `NotSupportedHere`, naming the method.
"""

from __future__ import annotations

import asyncio
import copy
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn, Protocol
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from core.chat.message_utils import (
    KiraCustomEvent,
    KiraEvent,
    KiraIMMessage,
    KiraIMSentResult,
    KiraMessageEvent,
    MessageChain,
)
from core.chat.session import AdapterInfo, Group, Session, SessionIdError, User
from core.plugin._decorators import HOOK_ATTR, HookMeta
from core.plugin._engine import HookEngine
from core.plugin._events import EventType, custom_event_name
from core.plugin._host import PluginManagerView

__all__ = [
    "NotSupportedHere",
    "PluginConfig",
    "KiraContextMixin",
    "MANAGER_NAMES",
    "wants_whole_output",
    "PluginInfo",
    "PluginManagerFacade",
    "KiraSessionBuffer",
    "KiraSessionBuffers",
    "KiraMessageProcessor",
    "KiraAdapter",
    "KiraAdapterManager",
    "KiraEventBus",
]

#: The manager attributes of KiraAI's `PluginContext`.
MANAGER_NAMES = (
    "message_processor",
    "adapter_mgr",
    "session_mgr",
    "provider_mgr",
    "persona_mgr",
    "event_bus",
    "tool_mgr",
    "sticker_manager",
)


def wants_whole_output(engine: HookEngine) -> bool:
    """Whether an `after_xml_parse` hook written for KiraAI's runtime is registered: then the agent loop parses a
    step's whole output before any of it is sent, and hands it to the hooks as one `MessageChains`."""
    for entry in engine.chain(EventType.AFTER_XML_PARSE.value):
        meta: HookMeta | None = getattr(entry.fn, HOOK_ATTR, None)
        if meta is not None and meta.whole_output:
            return True
    return False


class NotSupportedHere(NotImplementedError):
    """A KiraAI plugin API hookchat does not provide; the message names the method, says why, and points to the
    page that lists KiraAI's plugin API name by name."""

    PAGE = "docs/kira-compat.md"

    def __init__(self, method: str, why: str = "") -> None:
        self.method = method
        super().__init__(f"not supported here: {method}" + (f" ({why})" if why else "") + f"; see {self.PAGE}")


# What KiraAI's managers offer plugins, as protocols: the facades over the running app (core.kira, a higher layer)
# implement them, so a plugin's `ctx.message_processor...` is checked without core.plugin importing core.kira.


class KiraSessionBuffer(Protocol):
    """One session's buffered messages (`ctx.get_buffer(sid)`, KiraAI's `SessionBuffer`)."""

    @property
    def buffer(self) -> list[KiraMessageEvent]:
        """The buffered message events, oldest first (a copy)."""
        ...

    def get_length(self) -> int:
        """How many messages are buffered."""
        ...

    def get_buffer_lock(self) -> asyncio.Lock:
        """The session's lock, for a plugin that reads and changes the buffer in several steps."""
        ...

    def add(self, message: KiraMessageEvent) -> None:
        """Buffer one more message."""
        ...

    def pop(self, count: int = 1) -> list[KiraMessageEvent]:
        """Take the `count` oldest messages out of the buffer."""
        ...

    def flush(self, count: int | None = None) -> list[KiraMessageEvent]:
        """Take every buffered message out (at most `count`) without starting a turn."""
        ...


class KiraSessionBuffers(Protocol):
    """The session buffers by session id (`ctx.message_processor.session_buffer`)."""

    def get_buffer(self, session: str) -> KiraSessionBuffer:
        """The buffer of session `session` (`adapter:dm|gm:id`)."""
        ...


class KiraMessageProcessor(Protocol):
    """KiraAI's `MessageProcessor` (`ctx.message_processor`): session buffers, flushing a session, sending."""

    @property
    def session_buffer(self) -> KiraSessionBuffers:
        """The session buffers."""
        ...

    def get_session_buffer_length(self, sid: str) -> int:
        """How many messages session `sid` has buffered."""
        ...

    def get_session_lock(self, sid: str) -> asyncio.Lock:
        """The lock of session `sid`'s buffer."""
        ...

    async def pop_session_messages(self, sid: str, count: int = 1) -> None:
        """Drop the `count` oldest buffered messages of session `sid`."""
        ...

    async def flush_session_messages(self, sid: str, extra_event: KiraMessageEvent | None = None) -> bool:
        """Turn session `sid`'s buffer (and `extra_event`) into a batch now; False when there was nothing."""
        ...

    async def send_message_chain(self, session: str, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to session `adapter:dm|gm:id`."""
        ...

    async def message_format_to_text(self, message_chain: MessageChain) -> str:
        """The chain as the text the model reads."""
        ...

    async def handle_im_message(self, event: KiraMessageEvent) -> None:
        """Put the event's message through the pipeline as if its adapter had delivered it."""
        ...


class KiraAdapter(Protocol):
    """One adapter as KiraAI's adapter manager hands it out (`ctx.adapter_mgr.get_adapter(name)`)."""

    @property
    def info(self) -> AdapterInfo:
        """Its name, platform and options."""
        ...

    @property
    def message_types(self) -> list[str]:
        """The element types it can send."""
        ...

    @property
    def config(self) -> Mapping[str, Any]:
        """The adapter's options (`self_id`, ...)."""
        ...

    @property
    def emoji_dict(self) -> dict[str, Any] | None:
        """KiraAI's emoji table (None here)."""
        ...

    def get_client(self) -> Any:
        """The platform's client (OneBot's NapCat-shaped client; its shape is the platform's)."""
        ...

    async def send_group_message(self, group_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send a chain to a group."""
        ...

    async def send_direct_message(self, user_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send a chain to one user."""
        ...


class KiraAdapterManager(Protocol):
    """KiraAI's adapter manager (`ctx.adapter_mgr`)."""

    def get_adapter(self, name: str) -> KiraAdapter | None:
        """The adapter called `name`, or None."""
        ...

    def get_adapters(self) -> Mapping[str, KiraAdapter]:
        """Every adapter, by name."""
        ...

    def get_adapter_info(self, adapter_id: str) -> AdapterInfo | None:
        """One adapter's info, or None."""
        ...

    def get_adapters_info(self) -> list[AdapterInfo]:
        """Every adapter's info."""
        ...


class KiraEventBus(Protocol):
    """KiraAI's event bus (`ctx.event_bus`)."""

    async def publish(self, event: KiraEvent) -> None:
        """Deliver a message, batch or custom event as if it had come in."""
        ...


class _Absent:
    """A manager without an application behind it: every method KiraAI has raises `NotSupportedHere`."""

    def __init__(self, name: str, why: str) -> None:
        self._name = name
        self._why = why

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise NotSupportedHere(f"{self._name}.{attr}", self._why)

    def __repr__(self) -> str:
        return f"<{self._name}: {self._why}>"


class PluginConfig(dict):
    """`ctx.config`: the plugin's own settings (a dict, as before), which also answers KiraAI's application keys.

    KiraAI plugins read the application's config through `ctx.config["bot_config"]["bot"]...`, hookchat plugins
    their settings through `ctx.config["my_key"]`. This dict holds the plugin's settings; a key it lacks is looked
    up in the application's config in KiraAI's shape (`bot_config`, `locale`, `providers`, `models`, `adapters`,
    `network`). `[]`, `get`, `in`, attribute access (`ctx.config.bot_config`) and KiraAI's `get_config("a.b.c")`
    see both; iteration, `len`, `==` and copies see the plugin's settings only. A plugin setting with the same
    name as an application key wins.
    """

    def __init__(self, settings: Mapping[str, Any], app_config: Mapping[str, Any] | None, plugin_id: str) -> None:
        super().__init__(settings)
        self._app_config: Mapping[str, Any] = app_config if app_config is not None else {}
        self._plugin_id = plugin_id

    def with_settings(self, settings: Mapping[str, Any]) -> PluginConfig:
        """Other settings over the same application config (for a plugin constructed with a `cfg` of its own)."""
        return PluginConfig(settings, self._app_config, self._plugin_id)

    def __missing__(self, key: str) -> Any:
        try:
            return self._app_config[key]
        except KeyError:
            where = "the application's config" if self._app_config else "the application's config (none is running)"
            raise KeyError(f"{key!r} is neither a setting of plugin {self._plugin_id!r} nor a key of {where}") from None

    def get(self, key: str, default: Any = None) -> Any:
        """The plugin's setting `key`, else the application's, else `default`."""
        if dict.__contains__(self, key):
            return dict.__getitem__(self, key)
        return self._app_config.get(key, default)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._app_config

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        try:
            return self[key]
        except KeyError:
            raise AttributeError(f"config has no key {key!r}") from None

    def get_config(self, key: str, default: Any = None, splitter: str = ".") -> Any:
        """KiraAI's dotted lookup: `get_config("bot_config.agent.max_tool_loop", 5)`; `default` when any part is
        missing."""
        value: Any = self
        for part in key.split(splitter):
            if isinstance(value, Mapping) and part in value:
                value = value[part]
            else:
                return default
        return value

    def get_timezone(self) -> ZoneInfo | None:
        """The `locale.TZ` of the application's config as a `ZoneInfo`; None when unset or unknown."""
        name = self.get_config("locale.TZ")
        if not name:
            return None
        try:
            return ZoneInfo(str(name))
        except (ZoneInfoNotFoundError, ValueError):
            return None

    def save_config(self) -> None:
        """KiraAI writes its config file here; hookchat's config is the operator's file."""
        raise NotSupportedHere("config.save_config", "the configuration is the operator's hookchat.toml")

    def copy(self) -> dict[str, Any]:
        """The plugin's settings as a plain dict."""
        return dict(self)

    # Copies and pickles are of the settings alone: the application's config is live, not data to duplicate.
    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return copy.deepcopy(dict(self), memo)

    def __reduce__(self) -> tuple[Any, ...]:
        return (dict, (dict(self),))


@dataclass
class PluginInfo:
    """A plugin as KiraAI's plugin manager lists it: its manifest fields, where it comes from, and its `status`
    (`"ready"`, `"disabled"`, `"error"` with `error`, or `"pending"`)."""

    plugin_id: str
    display_name: str
    version: str = ""
    author: str = ""
    description: str = ""
    core_version: str | None = None
    builtin: bool = False
    error: str | None = None
    status: str = "pending"


_KIRA_STATUS = {"loaded": "ready", "disabled": "disabled", "error": "error", "discovered": "pending"}


class PluginManagerFacade:
    """KiraAI's `PluginManager` (`ctx.plugin_mgr`) over hookchat's plugin loader: list, look up, enable and
    disable plugins, read their manifests, settings and load errors."""

    def __init__(self, loader: PluginManagerView) -> None:
        self._loader = loader

    def _info(self, plugin_id: str) -> PluginInfo | None:
        source, status = self._loader.source(plugin_id), self._loader.status(plugin_id)
        if source is None and status is None:
            return None
        manifest = source.manifest if source is not None else None
        return PluginInfo(
            plugin_id,
            (manifest.display_name if manifest else "") or plugin_id,
            manifest.version if manifest else (status.version if status else ""),
            manifest.author if manifest else "",
            manifest.description if manifest else "",
            (manifest.core_version or None) if manifest else None,
            bool(source and source.builtin),
            status.reason if status is not None and status.state == "error" else None,
            _KIRA_STATUS.get(status.state, "pending") if status is not None else "pending",
        )

    def _ids(self) -> list[str]:
        return sorted({*(s.plugin_id for s in self._loader.statuses()), *self._loader.loaded_ids()})

    def list_plugins(self) -> list[PluginInfo]:
        """Every known plugin, sorted by id."""
        return [info for pid in self._ids() if (info := self._info(pid)) is not None]

    def get_plugin_info(self, plugin_id: str) -> PluginInfo | None:
        """One plugin's info, or None."""
        return self._info(plugin_id)

    def has_plugin(self, plugin_id: str) -> bool:
        """Whether a plugin of this id is known (loaded or not)."""
        return self._info(plugin_id) is not None

    def get_plugin_inst(self, plugin_id: str) -> Any:
        """The loaded plugin's instance, or None."""
        return self._loader.get_plugin(plugin_id)

    def get_registered_plugins(self) -> dict[str, type]:
        """The class of every loaded plugin, by id."""
        return {pid: type(self._loader.get_plugin(pid)) for pid in self._loader.loaded_ids()}

    def is_plugin_enabled(self, plugin_id: str) -> bool:
        """Whether the plugin is loaded and running."""
        return self._loader.get_plugin(plugin_id) is not None

    async def set_plugin_enabled(self, plugin_id: str, enabled: bool) -> None:
        """Enable (load) or disable (stop) a plugin; `ValueError` for an unknown id. Not persisted: the operator's
        `[plugins]` lists decide at the next start."""
        if not self.has_plugin(plugin_id):
            raise ValueError(f"no plugin {plugin_id!r}")
        if enabled:
            await self._loader.enable(plugin_id)
        else:
            await self._loader.disable(plugin_id)

    def get_plugin_manifest(self, plugin_id: str) -> dict[str, Any]:
        """The plugin's manifest as a dict ({} when unknown)."""
        source = self._loader.source(plugin_id)
        return source.manifest.model_dump() if source is not None else {}

    def get_plugin_config(self, plugin_id: str) -> dict[str, Any]:
        """The operator's settings of the plugin (as given; defaults come from its schema)."""
        return dict(self._loader.plugin_config.get(plugin_id) or {})

    def get_plugin_load_errors(self) -> dict[str, dict[str, Any]]:
        """The plugins that failed to load: `{plugin_id: {"error": reason}}`."""
        return {s.plugin_id: {"error": s.reason or ""} for s in self._loader.statuses() if s.state == "error"}

    def is_builtin_plugin(self, plugin_id: str) -> bool:
        """Whether the plugin is one of the framework's own (core/builtins)."""
        source = self._loader.source(plugin_id)
        return bool(source and source.builtin)

    async def update_plugin_config(self, plugin_id: str, config: dict[str, Any]) -> dict[str, Any]:
        """Check and apply new settings (the plugin is reloaded with them); `PluginConfigError` names a bad field."""
        await self._loader.configure(plugin_id, config)
        return self.get_plugin_config(plugin_id)

    _WHY = "plugins are installed as folders or packages by the operator"

    def uninstall_plugin(self, plugin_id: str) -> NoReturn:
        """Refused: the operator installs and removes plugins."""
        raise NotSupportedHere("plugin_mgr.uninstall_plugin", self._WHY)

    def install_plugin(self, *args: Any, **kwargs: Any) -> NoReturn:
        """Refused: the operator installs and removes plugins."""
        raise NotSupportedHere("plugin_mgr.install_plugin", self._WHY)


class KiraContextMixin:
    """KiraAI's `PluginContext` methods and managers, on hookchat's `PluginContext` (which sets `plugin_id`,
    `manager` and `config`)."""

    plugin_id: str
    manager: PluginManagerView | None
    config: PluginConfig

    # -- the managers ----------------------------------------------------------------------------------------------

    def _kira_manager(self, name: str) -> Any:
        runtime = self.manager.kira if self.manager is not None else None
        if runtime is None:
            return _Absent(name, "no application is running")
        return runtime.manager(name)

    @property
    def message_processor(self) -> KiraMessageProcessor:
        """KiraAI's message processor: session buffers, flushing a session, sending a chain."""
        return self._kira_manager("message_processor")

    @property
    def adapter_mgr(self) -> KiraAdapterManager:
        """KiraAI's adapter manager: `get_adapter(name)` and the adapters' info."""
        return self._kira_manager("adapter_mgr")

    @property
    def session_mgr(self) -> Any:
        """KiraAI's session manager: session info and the session's history, plain calls as in KiraAI."""
        return self._kira_manager("session_mgr")

    @property
    def provider_mgr(self) -> Any:
        """KiraAI's provider manager: the configured model clients."""
        return self._kira_manager("provider_mgr")

    @property
    def persona_mgr(self) -> Any:
        """KiraAI's persona manager: the persona the bot speaks as."""
        return self._kira_manager("persona_mgr")

    @property
    def event_bus(self) -> KiraEventBus:
        """KiraAI's event bus: `await publish(event)` for message, batch and custom events."""
        return self._kira_manager("event_bus")

    @property
    def plugin_mgr(self) -> Any:
        """KiraAI's plugin manager: list, look up, enable and disable plugins (`PluginManagerFacade`)."""
        if self.manager is None:
            return _Absent("plugin_mgr", "the plugin is not loaded by a plugin loader")
        return PluginManagerFacade(self.manager)

    @property
    def tool_mgr(self) -> object:
        """KiraAI's function tool manager (absent: use `@register.tool` or `self.register_llm_tool`)."""
        return _Absent("tool_mgr", "register tools with @register.tool or register_llm_tool")

    @property
    def sticker_manager(self) -> Any:
        """KiraAI's sticker manager: the stickers of `<data>/sticker/` (`sticker_dict`, `register_sticker`, ...)."""
        return self._kira_manager("sticker_manager")

    # -- the documented context methods ----------------------------------------------------------------------------

    def get_plugin_inst(self, plugin_id: str) -> Any:
        """The instance of another loaded plugin, or None."""
        return self.manager.get_plugin(plugin_id) if self.manager is not None else None

    def get_llm_client(self, model_uuid: str | None = None, llm_type: str | None = None) -> Any:
        """A model client: `llm_type` "default" or "fast", else `model_uuid` as `provider_id:model_id`; None when
        there is no such model (as in KiraAI)."""
        provider_mgr = self.provider_mgr
        if llm_type == "default":
            return provider_mgr.get_default_llm()
        if llm_type == "fast":
            return provider_mgr.get_default_fast_llm()
        if not model_uuid or ":" not in model_uuid:
            return None
        provider_id, _, model_id = model_uuid.partition(":")
        return provider_mgr.get_model_client(provider_id, model_id)

    def get_default_llm_client(self) -> Any:
        """The default model's client (`await client.chat(LLMRequest(...))`)."""
        return self.get_llm_client(llm_type="default")

    def get_default_fast_llm_client(self) -> Any:
        """The fast model's client; hookchat has one default model, so this is the same client."""
        return self.get_llm_client(llm_type="fast")

    def get_default_embedding_client(self) -> None:
        """KiraAI's embedding client: None here (hookchat has no embedding models), as KiraAI answers when none is
        configured."""
        return None

    def get_embedding_client(self, model_uuid: str = "", default: bool = False) -> None:
        """None: hookchat has no embedding models."""
        return None

    def get_buffer(self, sid: str) -> KiraSessionBuffer:
        """The message buffer of session `sid` (`get_length()`, `buffer`, `pop()`, `flush()`)."""
        return self.message_processor.session_buffer.get_buffer(sid)

    async def flush_session_messages(self, sid: str) -> bool:
        """Turn what session `sid` has buffered into a batch for the model now; False when it had nothing."""
        return await self.message_processor.flush_session_messages(sid)

    async def send_message_chain(self, session: str, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to the session `adapter:dm|gm:id` through its adapter; returns the `KiraIMSentResult`."""
        return await self.message_processor.send_message_chain(session, chain)

    async def publish_notice(self, session: str, chain: MessageChain, is_mentioned: bool = True) -> None:
        """Deliver `chain` to session `adapter:dm|gm:id` as an incoming notice (`is_notice=True`), through the whole
        pipeline like a platform message: the `im_message` hooks choose what happens to it. Raises `ValueError`
        for a malformed session or an unknown adapter."""
        try:
            target = Session.from_sid(session)
        except SessionIdError as exc:
            raise ValueError(f"Failed to parse session string {session!r}: {exc}") from None
        adapter = self.adapter_mgr.get_adapter(target.adapter_name)
        if adapter is None:
            raise ValueError(f"Failed to get adapter: {target.adapter_name}")
        group = Group(target.session_id) if target.is_group else None
        sender = User(target.session_id if not target.is_group else "unknown", "system")
        message = KiraIMMessage(
            chain if isinstance(chain, MessageChain) else MessageChain(chain),
            sender,
            target,
            group,
            message_id="system_message",
            is_mentioned=is_mentioned,
            timestamp=time.time(),
            self_id=str(adapter.config.get("self_id") or ""),
            is_notice=True,
        )
        event = KiraMessageEvent(message, adapter=adapter.info, message_types=adapter.message_types)
        await self.event_bus.publish(event)

    async def emit_custom_event(self, event_name: str, payload: dict[str, Any] | None = None) -> KiraCustomEvent:
        """Dispatch a custom event to `@on.custom_event(event_name=...)` hooks; returns it (KiraAI's name for
        `dispatch_custom`)."""
        event = KiraCustomEvent(event_name, payload or {}, source_plugin=self.plugin_id)
        if self.manager is not None:
            await self.manager.engine.dispatch(custom_event_name(event_name), event)
        return event

    def get_lang(self) -> str:
        """The configured language code (`locale.lang`), "en" when unset."""
        return self.config.get_config("locale.lang") or "en"

    def get_timezone(self) -> ZoneInfo | None:
        """The configured time zone (`locale.TZ`), or None: callers fall back to local time."""
        return self.config.get_timezone()

    async def register_provider(self, path: str) -> None:
        """KiraAI lets a plugin add a provider type; hookchat's providers come from the operator's config."""
        raise NotSupportedHere("register_provider", "providers are configured in [[providers]]")

    async def register_adapter(self, path: str) -> None:
        """KiraAI lets a plugin add an adapter type; hookchat's come from the `hookchat.adapters` entry points."""
        raise NotSupportedHere("register_adapter", "adapter types come from the hookchat.adapters entry points")

    async def unregister_provider(self, name: str) -> None:
        """See `register_provider`."""
        raise NotSupportedHere("unregister_provider", "providers are configured in [[providers]]")

    async def unregister_adapter(self, name: str) -> None:
        """See `register_adapter`."""
        raise NotSupportedHere("unregister_adapter", "adapter types come from the hookchat.adapters entry points")
