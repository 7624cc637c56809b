"""History that fits the model: the request is fitted to the provider's context window (oldest history first,
then the user's own message, cut with a notice), and a turn whose model call failed leaves nothing behind, so no
message can wedge a session, also after a restart."""

from __future__ import annotations

import pytest

from core.provider import ChatMessage, LLMRequest, LLMResponse, ProviderError
from core.provider.llm import OpenAIMessage
from core.provider.window import ContextWindow
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

WINDOW, REPLY = 2048, 256


class StrictModel(ScriptedProvider):
    """Refuses, as llama.cpp does, a request that does not fit its window (4 characters a token, as SmolLM2's
    tokenizer gives for English text), and answers "ok" otherwise."""

    def __init__(self) -> None:
        super().__init__(context_tokens=WINDOW, max_tokens=REPLY)

    async def complete(self, req: LLMRequest) -> LLMResponse:
        chars = sum(len(m["content"] or "") for m in req.to_openai_messages())
        needed = chars // 4 + REPLY
        if needed > WINDOW:
            raise ProviderError(f"Requested tokens ({needed}) exceed context window of {WINDOW}")
        self.add("ok")
        return await super().complete(req)


async def test_long_messages_never_wedge_the_session(tmp_path):
    config = {"data": {"dir": str(tmp_path)}}
    model = StrictModel()
    async with ChatHarness(provider=model, config=config) as bot:
        first = await bot.send("a" * 5000)
        second = await bot.send("b " * 2500)
        third = await bot.send("and now a short one")
    assert first[0].plain_text.startswith("(Your message was too long for the model: it read the first ")
    assert [c.plain_text for c in first[1:]] + [c.plain_text for c in second[1:]] == ["ok", "ok"]
    assert [c.plain_text for c in third] == ["ok"], "the short message is answered"
    async with ChatHarness(provider=model, config=config) as bot:  # a restart: history comes back from disk
        assert [c.plain_text for c in await bot.send("still there?")] == ["ok"]


async def test_the_oldest_history_goes_first_and_whole_turns_at_a_time(tmp_path):
    model = StrictModel()
    async with ChatHarness(provider=model, config={"data": {"dir": str(tmp_path)}}) as bot:
        for word in ("one", "two", "three"):
            await bot.send(f"{word} " + "x" * 1500)
        seen = model.requests[-1].messages
    assert seen, "recent history is still sent"
    assert seen[0].role == "user" and seen[0].content.startswith("two"), "'one' made room; 'two' is kept whole"


async def test_a_failed_model_call_stores_nothing(tmp_path):
    async with ChatHarness(provider=ScriptedProvider([ProviderError("server down")])) as bot:
        await bot.send("hello?")
        assert await bot.app.history.get_history("test:dm:user") == []
        assert bot.sent[0].plain_text.startswith("Sorry, I could not get an answer from the model")


@pytest.mark.slow
async def test_on_the_embedded_model_two_long_lines_and_a_restart_leave_the_session_working(tmp_path):
    """The case that wedged a session: two lines each longer than half the window (5,000 characters on 2,048
    tokens then; 2,600 on 1,024 here, the same proportions for a fifth of the model's work), then more."""
    pytest.importorskip("xllamacpp")
    from core.provider.local import LocalLlamaProvider  # the real model, loaded once for this test

    config = {"data": {"dir": str(tmp_path)}}
    provider = LocalLlamaProvider(context_tokens=1024, max_tokens=16, temperature=0.0)
    try:
        for attempt in range(2):  # the second round is a restart: history comes back from disk
            async with ChatHarness(provider=provider, config=config) as bot:
                for line in ("lorem ipsum dolor sit amet " * 95, "the quick brown fox jumps " * 100, "hi"):
                    await bot.send(line)
                errors = [c.plain_text for c in bot.sent if c.plain_text.startswith("Sorry, I could not")]
                assert errors == [], f"round {attempt}: {errors}"
                assert bot.sent, "the bot answered"
    finally:
        await provider.aclose()


def test_a_plugins_openai_messages_are_fitted_too():
    """A plugin may put OpenAI-shaped messages in a request (an `llm_request` hook, or its own request): one that
    calls a tool has no content and its tool calls are dicts. Fitting measures them instead of failing."""
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": "' + "x" * 8000 + '"}'}}
    req = LLMRequest(
        messages=[
            OpenAIMessage(role="user", content="look it up"),
            OpenAIMessage(role="assistant", content=None, tool_calls=[call]),
            OpenAIMessage(role="tool", content="found", tool_call_id="c1"),
            ChatMessage("user", "and now?"),
        ],
        user_prompt="thanks",
    )
    window = ContextWindow(ScriptedProvider(context_tokens=WINDOW, max_tokens=REPLY))
    assert window.fit(req, history_len=3, cut_user=True) is None, "the user's message fits: it is not cut"
    assert [m.role for m in req.messages] == ["user"], "the long tool-call exchange went, as whole turns do"
