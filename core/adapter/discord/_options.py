"""The options of a Discord adapter instance (`options = {...}` of an `[[adapters.instances]] type = "discord"`
entry), validated, and the one-line-per-problem error `hookchat run` shows for a refused config."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["DiscordOptions"]

_MIB = 1024 * 1024


class DiscordOptions(BaseModel):
    """How the adapter logs in and the bounds it keeps. See docs/adapters.md, "Discord".

    The bot token is read from the environment variable `token_env` (never from the file).
    """

    model_config = ConfigDict(extra="forbid")

    token_env: str = Field(default="DISCORD_BOT_TOKEN", pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    ignore_bots: bool = True
    typing: bool = True
    max_queued_messages: int = Field(default=1000, gt=0)
    max_upload_bytes: int = Field(default=10 * _MIB, gt=0)
    reconnect_initial: float = Field(default=1.0, gt=0)
    reconnect_max: float = Field(default=60.0, gt=0)

    def bot_token(self, env: Mapping[str, str] | None = None) -> str:
        """The bot token from `$token_env`; `ValueError` saying how to set it when it is not set."""
        value = (os.environ if env is None else env).get(self.token_env)
        if not value:
            raise ValueError(
                f"the bot token is read from ${self.token_env}, which is not set: export the token of "
                "your application's bot (Developer Portal, Bot, Reset Token), or name another variable "
                "with `token_env`"
            )
        return value
