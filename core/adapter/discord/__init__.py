"""Discord on discord.py 2: the adapter, its options, and the conversions between Discord messages and hookchat's
elements. Needs the `discord` extra: `pip install 'hookchat[discord]'`.

    [[adapters.instances]]
    type = "discord"
    options = { token_env = "DISCORD_BOT_TOKEN" }

See docs/adapters.md ("Discord") for every option, the intents, and how to set the bot up in the Developer Portal.
"""

from core.adapter.discord._adapter import CAPABILITIES, INTENTS, DiscordAdapter
from core.adapter.discord._convert import (
    TEXT_LIMIT,
    attachment_element,
    content_to_elements,
    embed_of,
    split_content,
    to_parts,
)
from core.adapter.discord._options import DiscordOptions

__all__ = [
    "DiscordAdapter",
    "DiscordOptions",
    "CAPABILITIES",
    "INTENTS",
    "TEXT_LIMIT",
    "attachment_element",
    "content_to_elements",
    "embed_of",
    "split_content",
    "to_parts",
]
