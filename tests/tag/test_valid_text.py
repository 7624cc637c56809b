"""The parser's text is always valid Unicode: a character split across stream chunks as its two surrogate halves
(a streamed emoji) comes out whole, and a lone surrogate (`\\ud83d`) comes out as U+FFFD, so whatever the model
wrote, every message can be stored and sent without `UnicodeEncodeError`."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sample_tags import make_tag_set
from test_parse_properties import FRAGMENTS

from core.chat import MessageChain
from core.chat.message_elements import Json, Text
from core.tag import StreamParser, parse_output

TAGS = make_tag_set()
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

HIGH, LOW = "\ud83d", "\ude00"  # the two halves of U+1F600
surrogates = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)
# Output with lone surrogates and split pairs anywhere: in text, tag values, attributes, hidden blocks.
outputs = st.lists(
    st.sampled_from([*FRAGMENTS, HIGH, LOW, HIGH + LOW, "\U0001f600", "<echo a='"]) | surrogates | st.text(max_size=3),
    max_size=40,
).map("".join)


def as_surrogate_pairs(text: str) -> str:
    """`text` with every character beyond U+FFFF written as its two surrogate halves, as a stream may deliver it."""
    return "".join(
        chr(0xD800 + ((ord(c) - 0x10000) >> 10)) + chr(0xDC00 + ((ord(c) - 0x10000) & 0x3FF)) if ord(c) > 0xFFFF else c
        for c in text
    )


def strings(value: object) -> Iterator[str]:
    """Every string a message element holds (its fields, and what a `Json` element carries)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings(key)
            yield from strings(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from strings(item)
    elif dataclasses.is_dataclass(value):
        for field in dataclasses.fields(value):
            yield from strings(getattr(value, field.name))


async def parse_chunked(text: str, cuts: list[int]) -> list[MessageChain]:
    parser = StreamParser(TAGS)
    chains: list[MessageChain] = []
    start = 0
    for cut in [*sorted(cuts), len(text)]:
        chains += await parser.feed(text[start:cut])
        start = cut
    return chains + await parser.close()


def parse(text: str) -> list[MessageChain]:
    return anyio.run(parse_output, text, TAGS)


def setup_module() -> None:
    logging.getLogger("hookchat.tag").setLevel(logging.CRITICAL)  # the failing <boom> tag would log every time


def teardown_module() -> None:
    logging.getLogger("hookchat.tag").setLevel(logging.NOTSET)


@SETTINGS
@given(outputs, st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_every_string_in_every_message_can_be_encoded_whatever_the_chunks(text: str, cuts: list[int]) -> None:
    cuts = [c for c in cuts if c <= len(text)]
    chains = anyio.run(parse_chunked, text, cuts)
    for chain in chains:
        for element in chain:
            for string in strings(element):
                string.encode("utf-8")  # raises UnicodeEncodeError on a lone surrogate
    assert chains == parse(text)


@SETTINGS
@given(st.text(min_size=1), st.lists(st.integers(min_value=0, max_value=100), max_size=8))
def test_a_character_split_into_its_surrogate_halves_comes_out_whole(text: str, cuts: list[int]) -> None:
    output = f"<msg><text>{text.replace('&', '&amp;').replace('<', '&lt;')}</text><echo a='{text}'/></msg>"
    split = as_surrogate_pairs(output)
    cuts = [c for c in cuts if c <= len(split)]
    assert anyio.run(parse_chunked, split, cuts) == parse(output)


@pytest.mark.anyio
async def test_a_pair_cut_between_its_halves_is_one_character() -> None:
    parser = StreamParser(TAGS)
    got = await parser.feed(f"<msg>smile {HIGH}") + await parser.feed(f"{LOW}!</msg>") + await parser.close()
    assert got == [[Text("smile \U0001f600!")]]


@pytest.mark.anyio
@pytest.mark.parametrize(
    "output, expected",
    [
        (f"<msg>a{HIGH}b</msg>", [[Text("a\ufffdb")]]),
        (f"<msg>a{LOW}{HIGH}b</msg>", [[Text("a\ufffd\ufffdb")]]),  # in the wrong order they are no pair
        (f"<echo id='{HIGH}'>{LOW}</echo>", [[Json({"value": "\ufffd", "id": "\ufffd"})]]),
        (f"<msg>the stream ends mid-character {HIGH}", [[Text("the stream ends mid-character \ufffd")]]),
    ],
)
async def test_a_lone_surrogate_becomes_the_replacement_character(output: str, expected: list) -> None:
    assert await parse_output(output, TAGS) == expected
    parser = StreamParser(TAGS)
    assert [*[m for c in output for m in await parser.feed(c)], *await parser.close()] == expected
