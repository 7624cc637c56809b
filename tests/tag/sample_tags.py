"""Sample tags for the tests: handlers whose results are easy to read (imported by conftest and the tests)."""

from __future__ import annotations

from core.chat.message_elements import At, Json, Notice, Text
from core.tag import BaseTag, TagSet


class TextTag(BaseTag):
    name = "text"
    description = "plain text"

    async def handle(self, value: str, **kwargs) -> list:
        return [Text(value)]


class AtTag(BaseTag):
    name = "at"
    description = 'mention a user: <at id="USER_ID"/>'

    async def handle(self, value: str, **kwargs) -> list:
        return [At(kwargs.get("id") or value.strip())]


class ActTag(BaseTag):
    """A root tag: may stand outside <msg> as an action of its own."""

    name = "act"
    description = "an action"
    root = True

    async def handle(self, value: str, **kwargs) -> list:
        return [Notice(value)] if value else []


class EchoTag(BaseTag):
    """Shows exactly what a handler receives."""

    name = "echo"
    description = "echo the value and attributes"

    async def handle(self, value: str, **kwargs) -> list:
        return [Json({"value": value, **kwargs})]


class BoomTag(BaseTag):
    name = "boom"
    description = "always fails"

    async def handle(self, value: str, **kwargs) -> list:
        raise RuntimeError("boom")


def make_tag_set() -> TagSet:
    """text, at, act (root), echo and boom (raises)."""
    return TagSet([TextTag, AtTag, ActTag, EchoTag, BoomTag])
