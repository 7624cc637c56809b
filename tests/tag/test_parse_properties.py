"""Properties of the parser that hold for every input (hypothesis): it never raises, it keeps every character
of text, and any chunking of a stream gives the same messages as parsing it whole."""

from __future__ import annotations

import logging

import anyio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sample_tags import make_tag_set

from core.chat.message_elements import BaseMessageElement, Text
from core.chat.message_utils import MessageChain
from core.tag import StreamParser, parse_output

TAGS = make_tag_set()
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Pieces of output that exercise every rule of the parser, in any order and number.
FRAGMENTS = [
    "<msg>",
    "</msg>",
    "<MSG >",
    "<msg/>",
    "<text>",
    "</text>",
    "<Text>",
    '<at id="1"/>',
    "<at id='2'>",
    "</at>",
    "<act>",
    "</act>",
    "<act/>",
    "<boom>",
    "</boom>",
    "<echo a=1 b='x y' c>",
    "</echo>",
    "<!--",
    "-->",
    "<![CDATA[",
    "]]>",
    "<!DOCTYPE x [",
    "]>",
    "<!ENTITY e 'v'>",
    "<?xml?>",
    "<think>",
    "</think>",
    "</THINK >",
    "<reasoning>",
    "</reasoning>",
    "&amp;",
    "&#x1F600;",
    "&#39;",
    "&lt;",
    "&",
    "&#",
    "<",
    "<3",
    ">",
    "/",
    "=",
    '"',
    "<b>",
    "</b>",
    "<t",
    "</",
    "<!",
    "<!-",
    "<![CD",
    " ",
    "\n",
    "a",
    "hello world ",
]
outputs = st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=40).map("".join)


def parse(text: str) -> list[MessageChain]:
    return anyio.run(parse_output, text, TAGS)


async def parse_chunked(text: str, cuts: list[int]) -> list[MessageChain]:
    parser = StreamParser(TAGS)
    chains: list[MessageChain] = []
    start = 0
    for cut in [*sorted(cuts), len(text)]:
        chains += await parser.feed(text[start:cut])
        start = cut
    return chains + await parser.close()


def setup_module() -> None:
    logging.getLogger("hookchat.tag").setLevel(logging.CRITICAL)  # the failing <boom> tag would log every time


def teardown_module() -> None:
    logging.getLogger("hookchat.tag").setLevel(logging.NOTSET)


@SETTINGS
@given(st.text() | outputs)
def test_never_raises_and_returns_clean_chains(text: str) -> None:
    chains = parse(text)
    for chain in chains:
        assert type(chain) is MessageChain and chain
        for element in chain:
            assert isinstance(element, BaseMessageElement)
            assert not (isinstance(element, Text) and not element.text)


@SETTINGS
@given(st.text(alphabet=st.characters(blacklist_characters="<&", blacklist_categories=("Cs",))))
def test_plain_text_is_one_message_kept_whole(text: str) -> None:
    # Lone surrogates are the one exception: they become U+FFFD (test_valid_text.py).
    assert parse(text) == ([[Text(text.strip())]] if text.strip() else [])


@SETTINGS
@given(st.text(alphabet="bcxyz <>&;/=\"' \n\t"))
@example("a<b")
@example("I <3 you & me")
@example("<b c='d'>x</b> & <y/>")
def test_raw_less_than_and_ampersand_lose_no_character(text: str) -> None:
    # Without `!`, `?` and `#`, no comment, declaration or character reference can form; with these letters no
    # known tag name can: then every `<`, `>` and `&` is text and the output is the input, trimmed at the edges.
    assert parse(text) == ([[Text(text.strip())]] if text.strip() else [])
    wrapped = parse(f"<msg>{text}</msg>")
    assert wrapped == ([[Text(text.strip())]] if text.strip() else [])


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;")


@SETTINGS
@given(st.lists(st.text(min_size=1), min_size=1, max_size=5))
def test_escaped_text_round_trips_exactly(texts: list[str]) -> None:
    output = "".join(f"<msg><text>{escape(t)}</text></msg>" for t in texts)
    assert parse(output) == [[Text(t)] for t in texts]


@SETTINGS
@given(st.text(alphabet=st.characters(min_codepoint=1, blacklist_categories=("Cs",)), min_size=1))
def test_numeric_references_round_trip(text: str) -> None:
    decimal = "".join(f"&#{ord(c)};" for c in text)
    hexadecimal = "".join(f"&#x{ord(c):X};" for c in text)
    assert parse(f"<msg><text>{decimal}</text></msg>") == [[Text(text)]]
    assert parse(f"<msg><text>{hexadecimal}</text></msg>") == [[Text(text)]]


@SETTINGS
@given(outputs, st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_any_chunking_gives_the_same_messages(text: str, cuts: list[int]) -> None:
    cuts = [c for c in cuts if c <= len(text)]
    assert anyio.run(parse_chunked, text, cuts) == parse(text)


@SETTINGS
@given(outputs)
def test_one_character_chunks_give_the_same_messages(text: str) -> None:
    assert anyio.run(parse_chunked, text, list(range(1, len(text)))) == parse(text)
