"""One turn sends at most `[limits] max_messages_per_turn` messages and `max_chars_per_turn` characters: a model
writing 100,000 `<msg>` blocks sends the cap, then one notice, and the turn ends (what was sent is stored)."""

from __future__ import annotations

import pytest

from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

NOTICE = "(The rest of this answer was not sent: it was longer than one answer may be.)"


@pytest.mark.parametrize("chunk_size", [None, 4096], ids=["whole", "streamed"])
async def test_a_flood_of_messages_stops_at_the_cap_with_a_notice(chunk_size) -> None:
    flood = "<msg>spam</msg>" * 100_000
    config = {"limits": {"max_messages_per_turn": 5}}
    async with ChatHarness(provider=ScriptedProvider([flood], chunk_size=chunk_size), config=config) as bot:
        replies = await bot.send("hi")
        stored = await bot.app.history.get_history("test:dm:user")

    assert [c.message_repr for c in replies] == ["spam"] * 5 + [NOTICE]
    assert stored[-1].content.count("spam") == 5


async def test_the_character_cap_counts_the_text_sent() -> None:
    config = {"limits": {"max_chars_per_turn": 25}}
    output = "<msg>" + "a" * 20 + "</msg><msg>" + "b" * 20 + "</msg>"
    async with ChatHarness(provider=ScriptedProvider([output]), config=config) as bot:
        replies = await bot.send("hi")

    assert [c.message_repr for c in replies] == ["a" * 20, NOTICE]
