"""A full turn with the bot, through the whole pipeline, on a real OpenAI-compatible server (xllamacpp's own HTTP
server running the embedded model on loopback)."""

from __future__ import annotations

import pytest

from core.provider.openai_provider import OpenAIProvider
from core.testing import ChatHarness

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.mark.parametrize("stream", [True, False])
async def test_a_full_turn_with_the_bot(model_server, stream):
    provider = OpenAIProvider(
        model_server.base_url,
        [model_server.model],
        api_key=model_server.api_key,
        timeout=120,
        max_tokens=24,
        temperature=0.0,
    )
    config = {"limits": {"max_steps": 2}}
    async with ChatHarness(provider=provider, config=config) as bot:
        bot.app.agent.settings.stream = stream
        chains = await bot.send("Hello! Say hi back.")
        history = await bot.app.history.get_history("test:dm:user")
    text = "".join(c.plain_text for c in chains)
    assert text.strip(), "the bot answered with text"
    assert [m.role for m in history] == ["user", "assistant"]
    assert history[1].content.strip() and history[0].content == "Hello! Say hi back."
