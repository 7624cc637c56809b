"""Who a message comes from and where it belongs: `User`, `Group`, `Session` (sid `adapter_name:dm|gm:id`) and
`AdapterInfo`, the platform connection it came through as KiraAI describes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["User", "Group", "Session", "SessionIdError", "AdapterInfo"]


class SessionIdError(ValueError):
    """A session id that is not of the form `adapter_name:dm|gm:id`."""


@dataclass(frozen=True, slots=True)
class User:
    """A chat user: platform id and display name."""

    user_id: str
    nickname: str = ""


@dataclass(frozen=True, slots=True)
class Group:
    """A group chat: platform id and name."""

    group_id: str
    name: str = ""


@dataclass(frozen=True, slots=True)
class Session:
    """One conversation: a direct chat (`dm`) or a group (`gm`) on one adapter. `sid` is its stable id."""

    adapter_name: str
    session_type: str  # "dm" or "gm"
    session_id: str
    # KiraAI's session info (`session_mgr.get_session_info`); not part of the session's identity.
    session_title: str | None = field(default=None, compare=False)
    session_description: str | None = field(default=None, compare=False)
    timestamp: float | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.session_type not in ("dm", "gm"):
            raise SessionIdError(f"session type must be 'dm' or 'gm', not {self.session_type!r}")

    @property
    def sid(self) -> str:
        """The session id, `adapter_name:dm|gm:id`."""
        return f"{self.adapter_name}:{self.session_type}:{self.session_id}"

    @property
    def is_group(self) -> bool:
        """True for a group chat."""
        return self.session_type == "gm"

    @classmethod
    def from_sid(cls, sid: str) -> Session:
        """Parse `adapter_name:dm|gm:id`; the id may itself contain colons."""
        parts = sid.split(":", 2)
        if len(parts) != 3 or not parts[0] or not parts[2]:
            raise SessionIdError(f"session id {sid!r} is not of the form 'adapter_name:dm|gm:id'")
        return cls(parts[0], parts[1], parts[2])

    def __str__(self) -> str:
        return self.sid


@dataclass(slots=True)
class AdapterInfo:
    """The adapter a message came through, in KiraAI's shape (`event.adapter`): its `name` (the first part of
    session ids), `platform` (the adapter type), whether it is `enabled`, and its `config` (the adapter options).

    `adapter_id` is the configured id; hookchat names adapters by `name`, so the two are the same here.
    """

    enabled: bool = True
    adapter_id: str = ""
    name: str = ""
    platform: str = ""
    description: str = ""
    config: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def named(cls, name: str, platform: str = "", config: dict[str, Any] | None = None) -> AdapterInfo:
        """The info of the adapter called `name` (platform defaults to the name when not known)."""
        return cls(True, name, name, platform or name, "", dict(config or {}))
