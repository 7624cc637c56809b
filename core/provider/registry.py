"""Provider types: a `[[providers]]` entry's `type` names an entry point of the `hookchat.providers` group, an
`LLMProvider` subclass whose `from_config` builds it from the entry. hookchat's own `openai` and `local` are
registered there like any other package's, so adding a provider is one class and one entry point."""

from __future__ import annotations

from core.config import (
    PROVIDER_ENTRY_POINT_GROUP,
    ConfigError,
    HookchatConfig,
    ProviderConfig,
    installed_provider_types,
    unknown_provider_type,
)
from core.provider.llm import LLMProvider
from core.utils.entry_points import entry_points

__all__ = ["build_provider", "provider_class"]

#: The entry that stands for "no [[providers]] table": the embedded model with its defaults.
_EMBEDDED = {"name": "local", "type": "local"}


def provider_class(type_name: str) -> type[LLMProvider]:
    """The `LLMProvider` subclass installed under `type_name`; `ConfigError` naming the installed types when there
    is none, or naming the entry point when it cannot be imported or is not a provider."""
    found = [ep for ep in entry_points(group=PROVIDER_ENTRY_POINT_GROUP) if ep.name == type_name]
    if not found:
        raise ConfigError(unknown_provider_type(type_name, installed_provider_types()))
    entry_point = found[0]
    try:
        loaded = entry_point.load()
    except Exception as exc:  # a broken package must say which entry point, not crash with its traceback
        raise ConfigError(
            f"provider type {type_name!r} ({entry_point.value}) cannot be imported: {type(exc).__name__}: {exc}"
        ) from exc
    if not (isinstance(loaded, type) and issubclass(loaded, LLMProvider)):
        raise ConfigError(f"provider type {type_name!r} ({entry_point.value}) is not an LLMProvider subclass")
    return loaded


def build_provider(config: HookchatConfig) -> LLMProvider:
    """The provider the config chooses (`HookchatConfig.provider()`), built by its type's `from_config`; the
    embedded model when the config names none."""
    entry = config.provider() or ProviderConfig.model_validate(_EMBEDDED)
    return provider_class(entry.served_by).from_config(entry)
