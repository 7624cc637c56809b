"""The options of a OneBot adapter instance (`options = {...}` of an `[[adapters.instances]]` entry), validated."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

__all__ = ["OneBotOptions"]

_MIB = 1024 * 1024


class OneBotOptions(BaseModel):
    """How to reach the OneBot v11 implementation(s) and the bounds the adapter keeps. See docs/configuration.md.

    `mode = "forward"`: hookchat connects to each of `url` (one account per URL). `mode = "reverse"`: hookchat
    serves `ws://host:port/path` and the implementations connect to it (any number of accounts). The access token
    is `token`, or the value of the environment variable named by `token_env` (which wins).
    """

    model_config = ConfigDict(extra="forbid")

    mode: Literal["forward", "reverse"] = "forward"
    url: list[str] = []
    token: SecretStr | None = None
    token_env: str | None = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    token_in: Literal["header", "query"] = "header"
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    path: str = Field(default="/onebot/v11/ws", pattern=r"^/")
    self_ids: list[str] = []
    default_self_id: str | None = None
    message_format: Literal["array", "string"] = "array"
    action_timeout: float = Field(default=30.0, gt=0)
    offline_send_timeout: float = Field(default=60.0, ge=0)
    reply_lookup_timeout: float = Field(default=5.0, ge=0)
    group_info_timeout: float = Field(default=5.0, ge=0)
    outbox_size: int = Field(default=100, gt=0)
    max_queued_events: int = Field(default=1000, gt=0)
    max_queued_bytes: int = Field(default=64 * _MIB, gt=0)
    busy_notice: str = (
        "Sorry, too many messages are waiting: I could not read {messages}. Please send again in a little while."
    )
    max_pending_actions: int = Field(default=1000, gt=0)
    max_routes: int = Field(default=10_000, gt=0)
    max_frame_bytes: int = Field(default=8 * _MIB, gt=0)
    reconnect_initial: float = Field(default=1.0, gt=0)
    reconnect_max: float = Field(default=60.0, gt=0)

    @field_validator("url", mode="before")
    @classmethod
    def _one_or_many(cls, value: object) -> object:
        return [value] if isinstance(value, str) else value

    @field_validator("url")
    @classmethod
    def _websocket_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            if not url.startswith(("ws://", "wss://")):
                raise ValueError(f"{url!r} is not a ws:// or wss:// URL")
        return value

    @field_validator("self_ids", mode="before")
    @classmethod
    def _ids_as_text(cls, value: object) -> object:
        return [str(v) for v in value] if isinstance(value, list) else value

    @field_validator("default_self_id", mode="before")
    @classmethod
    def _id_as_text(cls, value: object) -> object:
        return str(value) if isinstance(value, int) else value

    @model_validator(mode="after")
    def _mode_needs(self) -> OneBotOptions:
        if self.mode == "forward" and not self.url:
            raise ValueError(
                "forward mode needs `url` (the implementation's WebSocket server, e.g. ws://127.0.0.1:3001)"
            )
        if self.mode == "reverse" and self.url:
            raise ValueError("`url` is for forward mode; in reverse mode the implementation connects to host:port/path")
        if self.reconnect_max < self.reconnect_initial:
            raise ValueError("reconnect_max must not be below reconnect_initial")
        return self

    def access_token(self, env: Mapping[str, str] | None = None) -> str | None:
        """The access token: `$token_env` if named (it must then be set), else `token`, else None."""
        env = os.environ if env is None else env
        if self.token_env:
            value = env.get(self.token_env)
            if not value:
                raise ValueError(f"token_env names {self.token_env}, which is not set")
            return value
        return self.token.get_secret_value() if self.token else None
