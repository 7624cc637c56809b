"""Turn scheduling: per-session order, one turn per session at a time, sessions concurrent."""

import asyncio

import pytest

from core.plugin import BasePlugin, on
from core.provider import LLMProvider, LLMRequest, LLMResponse
from core.testing import ChatHarness

pytestmark = pytest.mark.anyio

SESSIONS, MESSAGES = 200, 20


class EchoModel(LLMProvider):
    """Answers with the user prompt after yielding to the loop, and records overlapping turns per session."""

    def __init__(self) -> None:
        self.running: dict[str, int] = {}
        self.max_overlap = 0
        self.max_parallel_sessions = 0

    async def complete(self, req: LLMRequest) -> LLMResponse:
        sid = req.metadata["sid"]
        self.running[sid] = self.running.get(sid, 0) + 1
        self.max_overlap = max(self.max_overlap, self.running[sid])
        self.max_parallel_sessions = max(self.max_parallel_sessions, sum(1 for n in self.running.values() if n))
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        self.running[sid] -= 1
        return LLMResponse(text_response=req.user_prompt)


class TriggerEverything(BasePlugin):
    @on.im_message()
    async def now(self, event, *_):
        event.trigger()

    @on.llm_request()
    async def tag_sid(self, event, req, tag_set, *_):
        req.metadata["sid"] = event.sid


async def test_interleaved_sessions_lose_nothing_keep_order_and_never_overlap():
    model = EchoModel()
    async with ChatHarness(
        plugins=[TriggerEverything], builtins=(), provider=model, config={"limits": {"max_concurrent_turns": 32}}
    ) as bot:
        turns = []
        for i in range(MESSAGES):
            for s in range(SESSIONS):
                received = await bot.app.receive(bot.message(f"{s}:{i}", user_id=f"u{s}"))
                turns.append(received.turn)
        await asyncio.gather(*turns)
        sent = [(r.session.sid, r.chain.plain_text) for r in bot.adapter.sent]
    for s in range(SESSIONS):
        # Messages that came while a turn ran joined the one batch that waited: each reply answers one batch.
        replies = [text for sid, text in sent if sid == f"test:dm:u{s}"]
        answered = [line.removeprefix(f"[u{s}] ") for text in replies for line in text.splitlines()]
        assert answered == [f"{s}:{i}" for i in range(MESSAGES)], "lost, doubled or out of order"
        assert len(replies) <= 2, "one turn, then one for everything that waited"
    assert model.max_overlap == 1, "two turns of one session ran at once"
    assert 1 < model.max_parallel_sessions <= 32, "sessions run concurrently, under the cap"
    assert bot.app.scheduler.busy_sessions() == 0, "an idle session keeps no scheduler state"
