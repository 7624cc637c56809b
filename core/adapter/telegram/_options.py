"""The options of a Telegram adapter instance (`options = {...}` of an `[[adapters.instances]] type = "telegram"`
entry), validated, and the one-line-per-problem error `hookchat run` shows for a refused config."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = ["TelegramOptions", "LOOPBACK_HOSTS"]

_ENV = r"^[A-Za-z_][A-Za-z0-9_]*$"
_MIB = 1024 * 1024
#: Hosts a webhook listener may bind to without being reachable from another machine.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


class TelegramOptions(BaseModel):
    """How the adapter reaches the Bot API and how updates arrive. See docs/adapters.md, "Telegram".

    The bot token is read from the environment variable `token_env` (never from the file). `mode = "polling"`
    (the default) asks `getUpdates`; `mode = "webhook"` serves `host:port/path` for Telegram to POST updates to,
    registered as `webhook_url`, each request checked against the secret token read from `secret_token_env`.
    """

    model_config = ConfigDict(extra="forbid")

    token_env: str = Field(default="TELEGRAM_BOT_TOKEN", pattern=_ENV)
    api_url: str = "https://api.telegram.org"
    mode: Literal["polling", "webhook"] = "polling"
    poll_timeout: int = Field(default=30, ge=0, le=50)
    webhook_url: str | None = None
    secret_token_env: str = Field(default="TELEGRAM_WEBHOOK_SECRET", pattern=_ENV)
    host: str = "127.0.0.1"
    port: int = Field(default=8443, ge=0, le=65535)
    path: str = Field(default="/telegram/webhook", pattern=r"^/")
    max_queued_updates: int = Field(default=1000, gt=0)
    max_body_bytes: int = Field(default=_MIB, gt=0)
    download_media: bool = True
    max_download_bytes: int = Field(default=20 * _MIB, ge=0)
    max_retry_after: float = Field(default=60.0, ge=0)
    request_timeout: float = Field(default=30.0, gt=0)
    reconnect_initial: float = Field(default=1.0, gt=0)
    reconnect_max: float = Field(default=60.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> TelegramOptions:
        if urlsplit(self.api_url).scheme not in ("http", "https"):
            raise ValueError(f"api_url {self.api_url!r} is not an http(s) URL")
        if self.mode == "webhook":
            if not self.webhook_url:
                raise ValueError(
                    "webhook mode needs `webhook_url`, the public https:// address Telegram posts to "
                    "(your reverse proxy forwards it to host:port/path)"
                )
            if urlsplit(self.webhook_url).scheme not in ("http", "https"):
                raise ValueError(f"webhook_url {self.webhook_url!r} is not an http(s) URL")
        elif self.webhook_url:
            raise ValueError('`webhook_url` is for mode = "webhook"; polling needs no public address')
        if self.reconnect_max < self.reconnect_initial:
            raise ValueError("reconnect_max must not be below reconnect_initial")
        return self

    def bot_token(self, env: Mapping[str, str] | None = None) -> str:
        """The bot token from `$token_env`; `ValueError` saying how to set it when it is not set."""
        value = (os.environ if env is None else env).get(self.token_env)
        if not value:
            raise ValueError(
                f"the bot token is read from ${self.token_env}, which is not set: export it with the "
                "token @BotFather gave you (or name another variable with `token_env`)"
            )
        return value

    def secret_token(self, env: Mapping[str, str] | None = None) -> str:
        """The webhook's secret token from `$secret_token_env`; `ValueError` when it is unset or not of the form
        Telegram accepts (1-256 characters of A-Z a-z 0-9 _ -)."""
        value = (os.environ if env is None else env).get(self.secret_token_env)
        if not value:
            raise ValueError(
                f"webhook mode needs a secret token in ${self.secret_token_env}, which is not set "
                "(the listener accepts only requests that carry it, on loopback too): export e.g. "
                "`python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
            )
        if not (1 <= len(value) <= 256) or not all(c.isalnum() or c in "_-" for c in value) or not value.isascii():
            raise ValueError(
                f"${self.secret_token_env} must be 1-256 characters of A-Z, a-z, 0-9, _ and - "
                "(Telegram refuses other secret tokens)"
            )
        return value
