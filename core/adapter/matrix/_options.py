"""The options of a Matrix adapter instance (`options = {...}` of an `[[adapters.instances]]` entry), validated, and
the secret they name read from the environment."""

from __future__ import annotations

import os
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = ["MatrixOptions"]

_MIB = 1024 * 1024
_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"


class MatrixOptions(BaseModel):
    """Which homeserver and account, and the bounds the adapter keeps. See docs/adapters.md, "Matrix".

    The secret is never in the file: `access_token_env` or `password_env` names the environment variable that
    holds it (exactly one of the two).
    """

    model_config = ConfigDict(extra="forbid")

    homeserver: str
    user_id: str = Field(pattern=r"^@[^:\s]+:\S+$")
    access_token_env: str | None = Field(default=None, pattern=_ENV_NAME)
    password_env: str | None = Field(default=None, pattern=_ENV_NAME)
    device_name: str = "hookchat"
    auto_join: bool = True
    sync_timeout: float = Field(default=30.0, gt=0, le=300)
    request_timeout: float = Field(default=30.0, gt=0)
    offline_send_timeout: float = Field(default=60.0, ge=0)
    reply_lookup_timeout: float = Field(default=5.0, ge=0)
    max_queued_events: int = Field(default=1000, gt=0)
    max_download_bytes: int = Field(default=20 * _MIB, ge=0)
    max_upload_bytes: int = Field(default=50 * _MIB, gt=0)
    max_text_chars: int = Field(default=8000, ge=100, le=16000)
    reconnect_initial: float = Field(default=1.0, gt=0)
    reconnect_max: float = Field(default=60.0, gt=0)

    @field_validator("homeserver")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(
                f"{value!r} is not an http:// or https:// URL (the homeserver's client API, e.g. "
                "https://matrix.example.org)"
            )
        return value.rstrip("/")

    @model_validator(mode="after")
    def _one_secret(self) -> MatrixOptions:
        if (self.access_token_env is None) == (self.password_env is None):
            raise ValueError(
                "set exactly one of `access_token_env` or `password_env` (the NAME of the environment "
                "variable holding the bot's access token or password)"
            )
        if self.reconnect_max < self.reconnect_initial:
            raise ValueError("reconnect_max must not be below reconnect_initial")
        return self

    def secret(self, env: Mapping[str, str] | None = None) -> tuple[str, str]:
        """`("access_token", value)` or `("password", value)`, read from the variable the options name; raises
        `ValueError` naming the variable when it is unset or empty."""
        env = os.environ if env is None else env
        kind, name = (
            ("access_token", self.access_token_env) if self.access_token_env else ("password", self.password_env)
        )
        assert name is not None
        value = env.get(name)
        if not value:
            raise ValueError(
                f"{kind}_env names {name}, which is not set (export the bot's {kind.replace('_', ' ')} as {name})"
            )
        return kind, value
