"""KiraAI compatibility at the application level: the managers KiraAI plugins find on their context
(`ctx.message_processor`, `ctx.adapter_mgr`, `ctx.session_mgr`, `ctx.provider_mgr`, `ctx.persona_mgr`,
`ctx.event_bus`, `ctx.sticker_manager`), the platform client of `adapter.get_client()` and the application's config in KiraAI's shape, all as facades over hookchat's own parts.

The application builds one `KiraRuntimeImpl` and hands it to its plugin manager; see docs/kira-compat.md for what
each facade does here and what it cannot do.
"""

from core.kira._config import KiraConfigView, kira_shaped_config
from core.kira._runtime import (
    AdapterManagerFacade,
    AdapterView,
    EventBusFacade,
    KiraRuntimeImpl,
    MessageProcessorFacade,
    MustAwait,
    PersonaInfo,
    PersonaManagerFacade,
    ProviderInfo,
    ProviderManagerFacade,
    SessionBufferView,
    SessionManagerFacade,
)
from core.kira._stickers import STICKER_EXTENSIONS, StickerManager

__all__ = [
    "KiraRuntimeImpl",
    "KiraConfigView",
    "kira_shaped_config",
    "MessageProcessorFacade",
    "SessionBufferView",
    "AdapterManagerFacade",
    "AdapterView",
    "SessionManagerFacade",
    "ProviderManagerFacade",
    "ProviderInfo",
    "PersonaManagerFacade",
    "PersonaInfo",
    "EventBusFacade",
    "MustAwait",
    "StickerManager",
    "STICKER_EXTENSIONS",
]
