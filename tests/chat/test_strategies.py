"""Message strategies, `force=True`, and `stop()` in the `im_message` stage, through the real pipeline."""

import pytest

from core.chat import KiraMessageEvent, MessageStrategy
from core.plugin import BasePlugin, Priority, on
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

STRATEGIES = ["trigger", "buffer", "flush", "discard"]


def strategy_plugin(first: str, first_force: bool, second: str):
    class Choose(BasePlugin):
        @on.im_message(priority=Priority.HIGH)
        async def first(self, event: KiraMessageEvent, *args, **kwargs):
            getattr(event, first)(force=first_force)

        @on.im_message(priority=Priority.LOW)
        async def second(self, event, *_):
            getattr(event, second)()

    return Choose


@pytest.mark.parametrize("first", STRATEGIES)
@pytest.mark.parametrize("second", STRATEGIES)
@pytest.mark.parametrize("force", [True, False])
async def test_a_forced_strategy_is_locked_and_an_unforced_one_is_overridden(first, second, force):
    async with ChatHarness(
        plugins=[strategy_plugin(first, force, second)], builtins=(), provider=ScriptedProvider(["ok"] * 3)
    ) as bot:
        received = await bot.app.receive(bot.message("hello"))
        assert received.strategy is MessageStrategy(first if force else second)


async def test_default_strategy_is_discard_without_the_chat_plugin():
    provider = ScriptedProvider(["never"])
    async with ChatHarness(builtins=(), provider=provider) as bot:
        assert await bot.send("hello") == []
        assert provider.requests == []


async def test_buffer_collects_until_flush_then_one_batch_holds_every_message():
    seen_batches = []

    class Collect(BasePlugin):
        @on.im_message()
        async def choose(self, event, *_):
            event.flush() if "go" in event.message_repr else event.buffer()

        @on.message_buffered()
        async def buffered(self, event, *_):
            seen_batches.append(("buffered", event.message_repr))

        @on.im_batch_message()
        async def batch(self, event, *_):
            seen_batches.append(("batch", [m.message_repr for m in event.messages]))

    async with ChatHarness(plugins=[Collect], builtins=(), provider=ScriptedProvider(["done"])) as bot:
        assert (await bot.app.receive(bot.message("one"))).turn is None
        assert (await bot.app.receive(bot.message("two"))).turn is None
        turn = (await bot.app.receive(bot.message("go"))).turn
        result = await turn
    assert seen_batches == [("buffered", "one"), ("buffered", "two"), ("batch", ["one", "two", "go"])]
    assert [c.plain_text for c in result.chains] == ["done"]
    assert bot.requests[0].user_prompt.splitlines() == ["[user] one", "[user] two", "[user] go"]


async def test_trigger_skips_the_buffer():
    class Trigger(BasePlugin):
        @on.im_message()
        async def now(self, event, *_):
            event.trigger()

    async with ChatHarness(plugins=[Trigger], builtins=(), provider=ScriptedProvider(["at once"])) as bot:
        received = await bot.app.receive(bot.message("hi"))
        assert received.turn is not None
        assert (await received.turn).chains[0].plain_text == "at once"
        assert bot.app.pipeline.buffers.size(received.event.sid) == 0


async def test_stop_in_im_message_drops_the_message_and_skips_later_hooks():
    ran = []

    class Stopper(BasePlugin):
        @on.im_message(priority=Priority.HIGH)
        async def stop_it(self, event, *_):
            event.trigger(force=True)
            event.stop()

        @on.im_message(priority=Priority.LOW)
        async def later(self, event, *_):
            ran.append("later")

    provider = ScriptedProvider(["never"])
    async with ChatHarness(plugins=[Stopper], provider=provider) as bot:
        assert await bot.send("hi") == []
    assert ran == [] and provider.requests == []
