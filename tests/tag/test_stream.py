"""Streaming: `StreamParser.feed()` hands out each message as soon as its `</msg>` arrived; `parse_stream` yields
them from an async iterable of chunks."""

from __future__ import annotations

import pytest

from core.chat.message_elements import At, Text
from core.tag import StreamParser, parse_output, parse_stream


@pytest.mark.anyio
async def test_messages_come_out_as_soon_as_they_are_closed(tag_set) -> None:
    parser = StreamParser(tag_set)
    assert await parser.feed("<msg>Hel") == []
    assert await parser.feed("lo</m") == []
    assert await parser.feed("sg><msg><at id=") == [[Text("Hello")]]
    assert await parser.feed('"1"/> you</msg>') == [[At("1"), Text(" you")]]
    assert await parser.feed("trailing text") == []  # bare text ends only at the next <msg> or at close()
    assert await parser.close() == [[Text("trailing text")]]


@pytest.mark.anyio
async def test_close_completes_an_unclosed_message(tag_set) -> None:
    parser = StreamParser(tag_set)
    await parser.feed("<msg><text>half a rep")
    assert await parser.close() == [[Text("half a rep")]]
    assert await parser.close() == []
    with pytest.raises(RuntimeError):
        await parser.feed("more")


@pytest.mark.anyio
async def test_a_reference_cut_in_two_is_still_decoded(tag_set) -> None:
    parser = StreamParser(tag_set)
    chains = []
    for chunk in ["<msg>fish &a", "mp; chips &#x1F6", "00;</msg>"]:
        chains += await parser.feed(chunk)
    assert chains == [[Text("fish & chips \U0001f600")]]


@pytest.mark.anyio
async def test_think_is_hidden_across_chunks(tag_set) -> None:
    parser = StreamParser(tag_set)
    chains = []
    for chunk in ["<thi", "nk>secret <msg>x</msg> still</th", "ink", "><msg>shown</msg>"]:
        chains += await parser.feed(chunk)
    assert chains == [[Text("shown")]]


@pytest.mark.anyio
async def test_a_long_unfinished_comment_in_small_chunks(tag_set) -> None:
    parser = StreamParser(tag_set)
    assert await parser.feed("<msg>a<!--") == []
    for _ in range(1000):
        assert await parser.feed("<b>x ") == []
    assert await parser.feed("-->b</msg>") == [[Text("ab")]]


@pytest.mark.anyio
async def test_parse_stream_yields_each_message(tag_set) -> None:
    async def chunks():
        for piece in ["<msg>one</msg><m", "sg>two</msg>", "three"]:
            yield piece

    got = [chain async for chain in parse_stream(chunks(), tag_set)]
    assert got == [[Text("one")], [Text("two")], [Text("three")]]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "output",
    [
        '<msg><text title="x > y">hello</text> and <at id="1>more</at></msg>',
        "<msg>Wrap it in a <think> tag.</msg><msg>Second</msg>",
    ],
)
async def test_a_quote_or_a_think_left_open_gives_the_same_messages_for_every_cut(tag_set, output: str) -> None:
    whole = await parse_output(output, tag_set)
    for cut in range(1, len(output)):
        parser = StreamParser(tag_set)
        got = await parser.feed(output[:cut]) + await parser.feed(output[cut:]) + await parser.close()
        assert got == whole, cut
