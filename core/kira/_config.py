"""The application's config in KiraAI's shape, which KiraAI plugins read as `ctx.config["bot_config"]...`.

Every value is derived from hookchat's own config (and the chat plugin's settings) when it is read, so it is
always the configuration in force; the operator's `[kira]` table is laid over it for what hookchat has no setting
of its own for (`locale.lang`, `bot_config.capabilities...`, anything a plugin reads).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:  # annotations only
    from core.config import HookchatConfig
    from core.plugin import PluginLoader

__all__ = ["KiraConfigView", "kira_shaped_config"]


class ConfiguredApp(Protocol):
    """The part of the running app the config view reads (`KiraApp` in `core.kira._runtime` has it): its config and the plugins,
    for the chat plugin's settings."""

    config: HookchatConfig
    plugins: PluginLoader


#: The chat plugin's debounce settings when neither the plugin nor the operator set them (its schema.json).
_CHAT_DEFAULTS = {"flush_messages": 5, "quiet_seconds": 1.5}


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    for key, value in over.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


def _chat_settings(app: ConfiguredApp) -> dict[str, Any]:
    chat = app.plugins.get_plugin("chat")
    settings = dict(_CHAT_DEFAULTS)
    settings.update(app.config.plugins.config.get("chat", {}))
    if chat is not None:
        settings.update(chat.cfg)
    return settings


def kira_shaped_config(app: ConfiguredApp) -> dict[str, Any]:
    """A fresh dict of the application's config in KiraAI's layout, with the operator's `[kira]` table over it."""
    config, limits = app.config, app.config.limits
    chat = _chat_settings(app)
    default = config.provider()
    default_model = f"{default.name}:{default.models[0]}" if default is not None and default.models else None
    shaped: dict[str, Any] = {
        "bot_config": {
            "bot": {
                "max_memory_length": limits.history_turns,
                "max_message_interval": chat["quiet_seconds"],
                "max_buffer_messages": chat["flush_messages"],
                "min_message_delay": 0,
                "max_message_delay": 0,
                "dynamic_prompt_position": "system",
                "memory_prompt_position": "system",
            },
            "agent": {
                "max_tool_loop": limits.max_steps,
                "max_tool_calls_per_turn": None,
                "tool_call_timeout": limits.tool_timeout,
            },
            "selfie": {"path": None},
            "capabilities": {
                "image_recognition": {"enabled": False, "mode": "native", "desc_prompt": ""},
                "tts": {"enabled": False},
                "stt": {"enabled": False},
                "image_generation": {"enabled": False},
                "video_generation": {"enabled": False},
                "forward_parsing": {"enabled": True},
            },
        },
        "locale": {"lang": None, "TZ": None},
        "providers": {
            p.name: {
                "name": p.name,
                "format": p.type,
                "provider_config": {"base_url": p.base_url},
                "model_config": {"llm": {m: {} for m in p.models}},
            }
            for p in config.providers
        },
        "models": {
            "default_llm": default_model,
            "default_fast_llm": default_model,
            "default_vlm": None,
            "default_tts": None,
            "default_stt": None,
            "default_image": None,
            "default_embedding": None,
            "default_rerank": None,
            "default_video": None,
        },
        "adapters": {
            a.adapter_name: {
                "name": a.adapter_name,
                "platform": a.type,
                "enabled": a.enabled,
                "desc": "",
                "config": dict(a.options),
            }
            for a in config.adapters.instances
        },
        "network": {"pypi_mirror": None, "http_proxy": None},
    }
    return _deep_merge(shaped, config.kira)


class KiraConfigView(Mapping[str, Any]):
    """A read-only mapping that builds `kira_shaped_config(app)` on each top-level lookup, so plugins always read
    the settings in force (a copy: writing into what it returns changes nothing)."""

    def __init__(self, app: ConfiguredApp) -> None:
        self._app = app

    def __getitem__(self, key: str) -> Any:
        return kira_shaped_config(self._app)[key]

    def __iter__(self) -> Iterator[str]:
        return iter(kira_shaped_config(self._app))

    def __len__(self) -> int:
        return len(kira_shaped_config(self._app))
