"""What the adapter knows of each joined room, kept from the state events of `/sync`: who is in it (joined or
invited, with display names), its name, and whether it is end-to-end encrypted."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["Room", "Rooms"]


@dataclass
class Room:
    """One joined room: `members` maps the ids of those joined or invited to their display names (or None)."""

    room_id: str
    members: dict[str, str | None] = field(default_factory=dict)
    name: str = ""
    alias: str = ""
    encrypted: bool = False

    def apply(self, event: dict[str, Any]) -> None:
        """Take in one state event (others are ignored)."""
        kind, key, content = event.get("type"), event.get("state_key"), event.get("content")
        if not isinstance(key, str) or not isinstance(content, dict):
            return
        if kind == "m.room.member":
            if content.get("membership") in ("join", "invite"):
                name = content.get("displayname")
                self.members[key] = name if isinstance(name, str) and name else None
            else:
                self.members.pop(key, None)
        elif kind == "m.room.encryption":
            self.encrypted = True
        elif kind == "m.room.name":
            self.name = str(content.get("name") or "")
        elif kind == "m.room.canonical_alias":
            self.alias = str(content.get("alias") or "")

    def display_name(self, me: str) -> str:
        """What a client would call the room: its name, else its alias, else the names of the others in it."""
        if self.name or self.alias:
            return self.name or self.alias
        others = sorted((name or uid) for uid, name in self.members.items() if uid != me)
        return ", ".join(others[:5])

    def user_name(self, user_id: str) -> str | None:
        """The display name `user_id` has in this room, if any."""
        return self.members.get(user_id)


class Rooms(dict[str, Room]):
    """Joined rooms by id, updated from each sync."""

    def update_from(self, room_id: str, events: list[Any]) -> Room:
        """Apply the state events among `events` (in order) to `room_id`, creating it when new."""
        room = self.get(room_id)
        if room is None:
            room = self[room_id] = Room(room_id)
        for event in events:
            if isinstance(event, dict) and "state_key" in event:
                room.apply(event)
        return room
