"""The agent loop on a streaming provider: each message goes out as soon as its `</msg>` arrives."""

import pytest

from core.plugin import BasePlugin, on
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

ANSWER = "<msg><text>first & foremost</text></msg>\n<msg>second <3</msg>tail"


@pytest.mark.parametrize("chunk_size", [1, 3, 7, 1000])
async def test_any_chunking_sends_the_same_messages_as_the_whole_answer(chunk_size):
    async with ChatHarness(provider=ScriptedProvider([ANSWER])) as whole:
        expected = [c.plain_text for c in await whole.send("hi")]
    async with ChatHarness(provider=ScriptedProvider([ANSWER], chunk_size=chunk_size)) as streamed:
        got = [c.plain_text for c in await streamed.send("hi")]
    assert got == expected == ["first & foremost", "second <3", "tail"]


async def test_each_message_goes_out_as_soon_as_it_is_complete_and_stop_ends_the_stream():
    sent = []

    class StopAfterFirst(BasePlugin):
        @on.message_sent()
        async def sent(self, event, result, *_):
            sent.append(result.chain.plain_text)
            event.stop()

    model = ScriptedProvider([ANSWER], chunk_size=4)
    async with ChatHarness(plugins=[StopAfterFirst], provider=model) as bot:
        chains = await bot.send("hi")
        history = await bot.app.history.get_history("test:dm:user")
    assert sent == ["first & foremost"] and [c.plain_text for c in chains] == sent
    assert [m.content for m in history if m.role == "assistant"] == ["first & foremost"]


async def test_an_llm_response_hook_sees_the_whole_answer_before_anything_is_sent():
    order = []

    class Filter(BasePlugin):
        @on.llm_response()
        async def response(self, event, resp, *_):
            order.append(("llm_response", resp.text_response))
            if "secret" in resp.text_response:
                event.stop()

        @on.message_sent()
        async def sent(self, event, result, *_):
            order.append(("sent", result.chain.plain_text))

    model = ScriptedProvider(["<msg>the secret</msg>", ANSWER], chunk_size=4)
    async with ChatHarness(plugins=[Filter], provider=model) as bot:
        assert await bot.send("hi") == []
        await bot.send("again")
    assert order == [
        ("llm_response", "<msg>the secret</msg>"),
        ("llm_response", ANSWER),
        ("sent", "first & foremost"),
        ("sent", "second <3"),
        ("sent", "tail"),
    ]


async def test_a_stream_that_breaks_after_a_message_keeps_it_in_history_and_final_result():
    from core.provider import ProviderError, StreamEvent

    class Breaks(ScriptedProvider):
        async def stream(self, req):
            yield StreamEvent(text="<msg>Part one.</msg><msg>Part")
            raise ProviderError("connection reset")

    finals = []

    class Final(BasePlugin):
        @on.final_result()
        async def final(self, event, chain, *_):
            finals.append(chain.plain_text)

    async with ChatHarness(plugins=[Final], provider=Breaks([], chunk_size=1)) as bot:
        chains = await bot.send("hi")
        history = await bot.app.history.get_history("test:dm:user")
    assert chains[0].plain_text == "Part one." and "could not get an answer" in chains[1].plain_text
    assert finals[0].startswith("Part one.Sorry, I could not get an answer")
    assert [(m.role, m.content) for m in history] == [("user", "hi"), ("assistant", "Part one.")]
