"""The agent loop reads the user's words after the `im_batch_message` hooks: what they rewrite is what the model
reads and what history keeps."""

from __future__ import annotations

import pytest

from core.plugin import BasePlugin, on
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio


class Rewrites(BasePlugin):
    @on.im_batch_message()
    async def rewrite(self, event, *_):
        for message in event.messages:
            message.message_str = f"(rewritten) {message.message_str}"


async def test_the_model_reads_the_message_as_the_batch_hooks_left_it():
    provider = ScriptedProvider(["<msg>one</msg>", "<msg>two</msg>"])
    async with ChatHarness([Rewrites], provider) as bot:
        await bot.send("hello")
        await bot.send("again")
    first, second = provider.requests
    assert str(first.user_prompt) == "(rewritten) hello"
    assert [m.content for m in second.messages if m.role == "user"] == ["(rewritten) hello"]
