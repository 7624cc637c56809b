"""Streaming cut anywhere: every document of the corpus, and the message boundaries the scanner takes in one match,
fed in two chunks cut at every position (and one character at a time) gives the messages, and the failures reported,
of parsing it in one chunk."""

from __future__ import annotations

import pytest
from test_parse_corpus import CORPUS

from core.chat.message_elements import At, Notice, Text
from core.tag import StreamParser, TagSet, parse_output

T = Text

# `</msg>`, layout whitespace and `<msg>` are taken as one piece: these say it means the same as its two tags
# (what the parser made of each before it took them in one piece).
BOUNDARIES: list[tuple[str, list[list]]] = [
    ("<msg>a</msg>\n<msg>b</msg>", [[T("a")], [T("b")]]),
    ("<msg><text>a</text></msg> \t\r\n <MSG>b</Msg>", [[T("a")], [T("b")]]),
    ("<msg>a</msg>\u00a0<msg>b</msg>", [[T("a")], [T("b")]]),
    ("<msg>a</msg> x <msg>b</msg>", [[T("a")], [T("x")], [T("b")]]),
    ("<msg>a</msg >\n<msg >b</msg>", [[T("a")], [T("b")]]),
    ("<msg>a</msg>\n<msg/>b", [[T("a")], [T("b")]]),
    ('<msg><at id="1"/></msg>\n<msg><text>a</msg>\n<msg>b', [[At("1")], [T("a")], [T("b")]]),
    ("<msg>a<think>hidden</msg>\n<msg>b</msg>", [[T("a")], [T("b")]]),
    ("<act>x</msg>\n<msg>y</msg>", [[Notice("x")], [T("y")]]),
    ("<text>a</msg>\n<msg>b", [[T("a")], [T("b")]]),
    ("</msg>\n<msg>", []),
    ("<msg>a</msg><!-- c --><msg>b</msg>", [[T("a")], [T("b")]]),
    # inside the next message a root tag is part of it; after `<msg/>` it stands alone
    ("<msg>a</msg>\n<msg>b<act>x</act>c</msg>", [[T("a")], [T("b"), Notice("x"), T("c")]]),
    ("<msg>a</msg>\n<msg/>b<act>x</act>c", [[T("a")], [T("b")], [Notice("x")], [T("c")]]),
]

DOCUMENTS = [output for _, output, _ in CORPUS] + [output for output, _ in BOUNDARIES]


async def parse_in(chunks: list[str], tag_set: TagSet) -> tuple[list, list[str]]:
    """The messages of `chunks` fed in turn, and the tags whose handler failed, in order."""
    failed: list[str] = []

    async def on_error(tag, exc) -> None:
        failed.append(tag.name)

    parser = StreamParser(tag_set, on_error=on_error)
    chains = []
    for chunk in chunks:
        chains += await parser.feed(chunk)
    return chains + await parser.close(), failed


@pytest.mark.anyio
@pytest.mark.parametrize(("output", "expected"), BOUNDARIES)
async def test_a_message_boundary_means_its_two_tags(tag_set, output: str, expected: list[list]) -> None:
    assert await parse_output(output, tag_set) == expected


@pytest.mark.anyio
@pytest.mark.parametrize("output", DOCUMENTS)
async def test_every_cut_gives_the_messages_of_one_chunk(tag_set, output: str) -> None:
    whole = await parse_in([output], tag_set)
    for cut in range(len(output) + 1):
        assert await parse_in([output[:cut], output[cut:]], tag_set) == whole, cut
    assert await parse_in(list(output), tag_set) == whole
