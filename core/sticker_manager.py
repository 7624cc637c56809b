"""KiraAI's module path for its sticker library: `StickerManager` (what `ctx.sticker_manager` is), over the pictures
of `<data>/sticker/` and their index `stickers.json` (docs/kira-compat.md)."""

from core.kira import STICKER_EXTENSIONS, StickerManager

__all__ = ["StickerManager", "STICKER_EXTENSIONS"]
