"""Parts of the SDK that belong to the original desktop host, kept importable: plugin-local i18n and settings models
(implemented), routers of entries (implemented), and hosted UI and OS activity (not available; they say so).
"""

from __future__ import annotations

import json
import string
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from core.services import EntryMeta, Err, Result, SdkError, declared_entries

__all__ = [
    "PluginI18n",
    "tr",
    "TranslatableText",
    "PluginSettings",
    "SettingsField",
    "PluginRouter",
    "OsActivitySnapshot",
    "get_os_activity_snapshot",
    "ui",
]


class TranslatableText(str):
    """A string that also carries its translation key (`tr("greeting")`)."""

    key: str

    def __new__(cls, key: str, text: str) -> TranslatableText:
        obj = super().__new__(cls, text)
        obj.key = key
        return obj


def tr(key: str, default: str | None = None, **kwargs: Any) -> TranslatableText:
    """Mark `key` as translatable text; its value is `default` (or the key), formatted with `kwargs`."""
    text = default if default is not None else key
    return TranslatableText(key, _format(text, kwargs))


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def _format(text: str, kwargs: dict[str, Any]) -> str:
    if not kwargs:
        return text
    try:
        return string.Formatter().vformat(text, (), _Keep(kwargs))
    except (ValueError, IndexError):
        return text


class PluginI18n:
    """Plugin-local translations: `<plugin_dir>/i18n/<locale>.json` (nested keys allowed). `t(key, **kwargs)`
    looks the key up in the locale, then the fallback locale, then returns the key itself."""

    def __init__(self, plugin_dir: Path | None, locale: str = "en", fallback: str = "en", folder: str = "i18n"):
        self.plugin_dir = Path(plugin_dir) if plugin_dir is not None else None
        self.locale = locale
        self.fallback = fallback
        self.folder = folder
        self._tables: dict[str, dict[str, Any]] = {}

    def _table(self, locale: str) -> dict[str, Any]:
        if locale not in self._tables:
            table: dict[str, Any] = {}
            if self.plugin_dir is not None:
                path = self.plugin_dir / self.folder / f"{locale}.json"
                try:
                    loaded = json.loads(path.read_text(encoding="utf-8"))
                    table = loaded if isinstance(loaded, dict) else {}
                except (OSError, ValueError):
                    table = {}
            self._tables[locale] = table
        return self._tables[locale]

    def t(self, key: str, locale: str | None = None, **kwargs: Any) -> str:
        """The translation of `key` formatted with `kwargs` (unknown placeholders are left as they are)."""
        for candidate in (locale or self.locale, self.fallback):
            node: Any = self._table(candidate)
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if isinstance(node, str):
                return _format(node, kwargs)
        return key


class PluginSettings(BaseModel):
    """A typed view of a plugin's config: subclass with fields, then `MySettings.from_config(self.cfg)`."""

    model_config = ConfigDict(extra="ignore")

    @classmethod
    def from_config(cls, config: dict[str, Any]) -> PluginSettings:
        """Validate `config` into this model (unknown keys ignored); raises pydantic's `ValidationError`."""
        return cls.model_validate(config)


#: A field of a `PluginSettings` model (pydantic's `Field`).
SettingsField = Field


class PluginRouter:
    """A group of `@plugin_entry` methods mounted on a plugin with `plugin.include_router(router, prefix=...)`;
    its entries become the plugin's, with ids `<prefix><id>`. `self.plugin` is the plugin it is mounted on."""

    def __init__(self, name: str | None = None, *, prefix: str = "") -> None:
        self.name = name or type(self).__name__
        self.prefix = prefix
        self.plugin: Any = None
        self.mounted_ids: list[str] = []

    def entries(self) -> list[tuple[EntryMeta, Any]]:
        """`(entry meta, bound method)` of this router's declared entries."""
        return declared_entries(self)


class OsActivitySnapshot(BaseModel):
    """What the original desktop host knew of the user's OS activity. hookchat observes none."""

    active_window: str | None = None
    idle_seconds: float | None = None
    captured_at: float | None = None


def get_os_activity_snapshot(*_args: Any, **_kwargs: Any) -> Result[OsActivitySnapshot, SdkError]:
    """Always `Err`: hookchat runs without a desktop host and does not observe the user's OS activity."""
    return Err(SdkError("OS activity is not available in hookchat (no desktop host)", code="not_supported"))


class _HostedUI:
    """The hosted-UI namespace of the original desktop host. hookchat has no UI host: any use raises `SdkError`."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        raise SdkError(
            f"ui.{name} is not available in hookchat: there is no hosted UI (see docs/sdk.md)", code="not_supported"
        )


#: Hosted UI surfaces of the original host; not available in hookchat (using one raises `SdkError`).
ui = _HostedUI()
