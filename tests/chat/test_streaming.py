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


async def test_a_message_is_sent_before_the_stream_ends_and_stop_ends_the_stream():
    order = []

    class Watch(BasePlugin):
        @on.message_sent()
        async def sent(self, event, result, *_):
            order.append(("sent", result.chain.plain_text))
            event.stop()

        @on.llm_response()
        async def response(self, event, resp, *_):
            order.append(("llm_response", resp.text_response))

    async with ChatHarness(plugins=[Watch], provider=ScriptedProvider([ANSWER], chunk_size=4)) as bot:
        chains = await bot.send("hi")
        history = await bot.app.history.get_history("test:dm:user")
    assert order == [("sent", "first & foremost")]
    assert [c.plain_text for c in chains] == ["first & foremost"]
    assert [m.content for m in history if m.role == "assistant"] == ["first & foremost"]
