"""The built-in chat plugin: debounce by count and by quiet time, groups, wake words, timers owned by it. Time is a
`ManualClock`: the tests move it by hand, so no test waits for a real timer."""

import pytest

from core.chat import MessageStrategy
from core.plugin import BasePlugin, Priority, on
from core.testing import ChatHarness, ManualClock, ScriptedProvider

pytestmark = pytest.mark.anyio


async def test_buffer_flushes_when_it_reaches_flush_messages():
    config = {"plugins": {"config": {"chat": {"flush_messages": 3, "quiet_seconds": 60}}}}
    async with ChatHarness(provider=ScriptedProvider(["all three"]), config=config) as bot:
        first = await bot.app.receive(bot.message("a"))
        second = await bot.app.receive(bot.message("b"))
        third = await bot.app.receive(bot.message("c"))
        assert [first.strategy, second.strategy, third.strategy] == [MessageStrategy.BUFFER] * 2 + [
            MessageStrategy.FLUSH
        ]
        result = await third.turn
    assert result.chains[0].plain_text == "all three"
    assert [m.message_repr for m in result.batch.messages] == ["a", "b", "c"]


async def test_buffer_flushes_after_quiet_seconds_sliding_with_each_message():
    config = {"plugins": {"config": {"chat": {"flush_messages": 100, "quiet_seconds": 1.5}}}}
    clock = ManualClock()
    async with ChatHarness(provider=ScriptedProvider(["after the quiet"]), config=config, clock=clock) as bot:
        await bot.app.receive(bot.message("a"))
        await clock.advance(1.0)
        await bot.app.receive(bot.message("b"))  # the quiet timer starts again
        await clock.advance(1.0)
        assert bot.sent == [], "1 s after the last message is not quiet enough"
        await clock.advance(0.5)
        await bot.app.scheduler.join()
        assert bot.sent[0].plain_text == "after the quiet"
        assert bot.requests[0].user_prompt == "[user] a\n[user] b"


async def test_groups_answer_only_when_mentioned_or_woken():
    config = {"plugins": {"config": {"chat": {"wake_words": ["Robo"]}}}}
    async with ChatHarness(provider=ScriptedProvider(["mentioned", "woken"]), config=config) as bot:
        assert await bot.send("chatter", group_id="g1", mentioned=False) == []
        assert (await bot.send("hey", group_id="g1", mentioned=True))[0].plain_text == "mentioned"
        assert (await bot.send("hey robo!", group_id="g1", mentioned=False))[0].plain_text == "woken"
        assert len(bot.requests) == 2


async def test_disabling_the_chat_plugin_cancels_its_timers_and_tasks():
    config = {"plugins": {"config": {"chat": {"flush_messages": 100, "quiet_seconds": 0.05}}}}
    clock = ManualClock()
    async with ChatHarness(provider=ScriptedProvider(["never"]), config=config, clock=clock) as bot:
        await bot.app.receive(bot.message("a"))
        chat = bot.plugin("chat")
        assert chat._timers and bot.app.plugins.status("chat").tasks == 1
        await bot.app.plugins.disable("chat")
        assert chat._timers == {}
        assert all(t.done() for t in chat.ctx.tasks) and not chat.ctx.tasks
        await clock.advance(3600)
        await bot.app.scheduler.join()
        assert bot.adapter.sent == [], "a stopped plugin's timer never fires"
        assert clock.pending == 0, "and nothing of it waits on the clock"


async def test_a_later_hook_overriding_the_flush_does_not_strand_the_buffered_messages():
    class DropSpam(BasePlugin):
        @on.im_message(priority=Priority.LOW)
        async def drop(self, event, *_):
            if "spam" in event.message_repr:
                event.discard(force=True)

    config = {"plugins": {"config": {"chat": {"flush_messages": 2, "quiet_seconds": 0.05}}}}
    clock = ManualClock()
    async with ChatHarness(
        plugins=[DropSpam], provider=ScriptedProvider(["answer"]), config=config, clock=clock
    ) as bot:
        await bot.app.receive(bot.message("hello"))
        assert (await bot.app.receive(bot.message("spam"))).strategy is MessageStrategy.DISCARD
        await clock.advance(0.05)  # the quiet timer of "hello" still flushes it
        await bot.app.scheduler.join()
        assert [c.plain_text for c in bot.sent] == ["answer"]
        assert bot.requests[0].user_prompt == "hello"


async def test_the_chat_plugin_evicts_buffers_nobody_flushed():
    config = {"plugins": {"config": {"chat": {"flush_messages": 100, "quiet_seconds": 3600, "idle_evict_seconds": 60}}}}
    clock = ManualClock()
    async with ChatHarness(provider=ScriptedProvider([]), config=config, clock=clock) as bot:
        await bot.app.receive(bot.message("lingering"))
        buffers = bot.app.buffers
        await clock.advance(59)
        assert len(buffers) == 1, "not idle for long enough yet"
        await clock.advance(31)  # the sweep every 30 s finds it idle for 60 s or more
        assert len(buffers) == 0


async def test_at_most_max_buffered_sessions_hold_a_buffer():
    config = {
        "limits": {"max_buffered_sessions": 2},
        "plugins": {"config": {"chat": {"flush_messages": 100, "quiet_seconds": 3600}}},
    }
    async with ChatHarness(provider=ScriptedProvider([]), config=config) as bot:
        for user in ("a", "b", "c"):
            await bot.app.receive(bot.message("hi", user_id=user))
        assert sorted(bot.app.buffers.sessions()) == ["test:dm:b", "test:dm:c"]


async def test_idle_buffers_are_evicted():
    async with ChatHarness(provider=ScriptedProvider([]), builtins=()) as bot:
        buffers = bot.app.buffers

        class Buffer(BasePlugin):
            @on.im_message()
            async def keep(self, event, *_):
                event.buffer()

        bot.app.plugins.add_class(Buffer)
        await bot.app.plugins.load("buffer")
        await bot.app.receive(bot.message("lingering"))
        assert len(buffers) == 1
        assert buffers.evict_idle(0) == ["test:dm:user"]
        assert len(buffers) == 0
