"""Telegram through the Bot API (aiogram 3): the adapter, its options, and the conversions between Telegram's text
with entities and hookchat's elements. Needs the `telegram` extra: `pip install 'hookchat[telegram]'`.

    [[adapters.instances]]
    type = "telegram"
    name = "tg"
    options = { token_env = "TELEGRAM_BOT_TOKEN" }

See docs/adapters.md ("Telegram") for every option and how to set the bot up with @BotFather.
"""

from core.adapter.telegram._adapter import CAPABILITIES, SECRET_HEADER, TelegramAdapter
from core.adapter.telegram._convert import TEXT_LIMIT, entities_to_elements, split_text, to_outgoing, utf16_len
from core.adapter.telegram._options import TelegramOptions

__all__ = [
    "TelegramAdapter",
    "TelegramOptions",
    "CAPABILITIES",
    "SECRET_HEADER",
    "TEXT_LIMIT",
    "entities_to_elements",
    "split_text",
    "to_outgoing",
    "utf16_len",
]
