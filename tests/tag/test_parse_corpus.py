"""What the parser makes of valid and malformed model output: one case per failure mode, with the expected
messages. Reading the table is the quickest way to learn the parser's rules (docs/tags.md explains them)."""

from __future__ import annotations

import logging

import pytest

from core.chat.message_elements import At, Json, Notice, Text
from core.chat.message_utils import MessageChain
from core.tag import BaseTag, current_event, parse_output

T = Text

CORPUS: list[tuple[str, str, list[list]]] = [
    # -- valid output --------------------------------------------------------------------------------------------
    ("valid", '<msg><text>Hi</text><at id="1"/></msg>', [[T("Hi"), At("1")]]),
    ("two messages", "<msg>one</msg><msg>two</msg>", [[T("one")], [T("two")]]),
    (
        "layout whitespace",
        '<msg>\n  <text>a</text>\n  <at id="1"/>\n</msg>\n\n<msg>\n b \n</msg>\n',
        [[T("a"), At("1")], [T("b")]],
    ),
    ("text tag keeps spaces", "<msg><text>  two  spaces  </text></msg>", [[T("  two  spaces  ")]]),
    ("bare text between tags", '<msg>Hi <at id="1"/>, how are you?</msg>', [[T("Hi "), At("1"), T(", how are you?")]]),
    # -- stray & and < -------------------------------------------------------------------------------------------
    ("heart and ampersand", "I <3 you & me", [[T("I <3 you & me")]]),
    ("less-than", "a<b", [[T("a<b")]]),
    ("less-than in msg", "<msg>if a<b and c>d then</msg>", [[T("if a<b and c>d then")]]),
    ("comparison", "<msg>5 < 6 && 7 > 3</msg>", [[T("5 < 6 && 7 > 3")]]),
    ("runs of brackets", "<3 <<< >>> <> </>", [[T("<3 <<< >>> <> </>")]]),
    ("unfinished tag at the end", '<msg>x <at id="1"', [[T('x <at id="1"')]]),
    ("unfinished end tag", "<msg>x</msg", [[T("x</msg")]]),
    ("quoted attribute holding >", '<msg><text title="x > y">hello</text></msg>', [[T("hello")]]),
    (
        "unclosed think in prose ends with its message",
        "<msg>Wrap it in a <think> tag, then answer.</msg><msg>Second</msg>",
        [[T("Wrap it in a")], [T("Second")]],
    ),
    # -- text outside <msg> --------------------------------------------------------------------------------------
    ("bare text only", "  Just text.  ", [[T("Just text.")]]),
    ("text around blocks", "Sure!\n<msg>in</msg>\nBye", [[T("Sure!")], [T("in")], [T("Bye")]]),
    ("known tag outside msg joins the text", '<at id="5"/> hello', [[At("5"), T(" hello")]]),
    ("stray end tags", "</text>hello</msg>world", [[T("hello")], [T("world")]]),
    # -- case, attributes ----------------------------------------------------------------------------------------
    ("any letter case", "<MSG><Text>Hi</TEXT><AT ID=7/></Msg>", [[T("Hi"), At("7")]]),
    (
        "attribute styles",
        """<echo a="1" B='two words' c=3 flag d = "x&amp;y" e="unterminated/>""",
        [[Json({"value": "", "a": "1", "b": "two words", "c": "3", "flag": "", "d": "x&y", "e": "unterminated"})]],
    ),
    ("attribute named value", '<at value="7"/>', [[At("7")]]),
    ("attribute named self", '<echo self="x">v</echo>', [[Json({"value": "v"})]]),
    ("url attribute, self-closing", "<echo src=http://a/b/>", [[Json({"value": "", "src": "http://a/b"})]]),
    # -- unknown tags --------------------------------------------------------------------------------------------
    ("unknown tag kept verbatim", "<msg><b>bold</b> text</msg>", [[T("<b>bold</b> text")]]),
    ("unknown tag inside a known one", "<msg><text>a <i>b</i></text></msg>", [[T("a <i>b</i>")]]),
    ("html-ish line break", "<msg>a<br>b</msg>", [[T("a<br>b")]]),
    # -- nesting, unclosed, mismatched ---------------------------------------------------------------------------
    ("tag opened inside a tag ends it", '<msg><text>a<at id="1"/>b</text></msg>', [[T("a"), At("1"), T("b")]]),
    ("msg inside msg", "<msg>a<msg>b</msg>c</msg>", [[T("a")], [T("b")], [T("c")]]),
    ("unclosed msg", "<msg>hello", [[T("hello")]]),
    ("unclosed tag", "<msg><text>hello</msg>", [[T("hello")]]),
    ("unclosed tag at the end", "<msg><text>hello", [[T("hello")]]),
    ("mismatched end tag closes the open tag", "<msg><text>hi</at> there</text></msg>", [[T("hi"), T(" there")]]),
    ("self-closing msg", "<msg/>hi", [[T("hi")]]),
    # -- comments, CDATA, declarations ---------------------------------------------------------------------------
    ("comment dropped", "<msg>a<!-- secret -->b</msg>", [[T("ab")]]),
    ("unclosed comment is text", "<msg>a<!-- b</msg>", [[T("a<!-- b")]]),
    ("cdata kept literally", "<msg><![CDATA[<at id=1/> &amp;]]></msg>", [[T("<at id=1/> &amp;")]]),
    ("unclosed cdata is text", "<msg><![CDATA[x<at id=1/></msg>", [[T("<![CDATA[x"), At("1")]]),
    ("doctype with entities, never expanded", '<!DOCTYPE r [<!ENTITY x "boom">]><msg>&x;</msg>', [[T("&x;")]]),
    ("entity declaration dropped", '<!ENTITY x "y"><msg>&x;</msg>', [[T("&x;")]]),
    ("processing instruction dropped", '<?xml version="1.0"?><msg>hi</msg>', [[T("hi")]]),
    # -- character references ------------------------------------------------------------------------------------
    (
        "references decoded",
        "<msg>&amp; &lt; &gt; &quot; &apos; &#39; &#x1F600; &#128512;</msg>",
        [[T("& < > \" ' ' \U0001f600 \U0001f600")]],
    ),
    (
        "unknown and invalid references kept",
        "<msg>&foo; & &#xD800; &#0; &#99999999; &amp</msg>",
        [[T("&foo; & &#xD800; &#0; &#99999999; &amp")]],
    ),
    ("escaped markup is text", "<msg><text>&lt;msg&gt; &amp;lt;</text></msg>", [[T("<msg> &lt;")]]),
    # -- hidden reasoning ----------------------------------------------------------------------------------------
    ("think dropped", "<think>plan</think><msg>hi</msg>", [[T("hi")]]),
    ("unclosed think dropped to the end", "<msg>hi</msg><think>still <msg>no</msg>", [[T("hi")]]),
    ("reasoning, any case", "<Reasoning>x</REASONING >hi", [[T("hi")]]),
    ("think inside msg", "<msg>a<think>b</think>c</msg>", [[T("ac")]]),
    ("stray end of think", "hi</think>", [[T("hi")]]),
    # -- handlers ------------------------------------------------------------------------------------------------
    ("failing handler degrades to its text", "<msg>x <boom>fallback</boom></msg>", [[T("x "), T("fallback")]]),
    ("failing handler without text", "<msg>x<boom/></msg>", [[T("x")]]),
    (
        "root tag outside msg is a message of its own",
        "hi<act>wave</act>there",
        [[T("hi")], [Notice("wave")], [T("there")]],
    ),
    ("root tag inside msg", "<msg>a<act>w</act>b</msg>", [[T("a"), Notice("w"), T("b")]]),
    ("root tag returning nothing", "<act/>", []),
    # -- nothing to send -----------------------------------------------------------------------------------------
    ("empty", "", []),
    ("whitespace", " \n\t ", []),
    ("empty blocks", "<msg></msg><msg/><msg> \n </msg><msg><text></text></msg>", []),
]


@pytest.mark.anyio
@pytest.mark.parametrize(("output", "expected"), [c[1:] for c in CORPUS], ids=[c[0] for c in CORPUS])
async def test_corpus(tag_set, output: str, expected: list[list]) -> None:
    chains = await parse_output(output, tag_set)
    assert chains == expected
    assert all(type(chain) is MessageChain for chain in chains)


@pytest.mark.anyio
async def test_deep_nesting_does_not_recurse(tag_set) -> None:
    depth = 10_000
    output = "<msg>" + "<text><b>" * depth + "x" + "</b></text>" * depth + "</msg>"
    chains = await parse_output(output, tag_set)
    assert len(chains) == 1
    assert "".join(e.text for e in chains[0]) == "<b>" * depth + "x" + "</b>" * depth


@pytest.mark.anyio
async def test_failing_handler_is_reported_to_on_error(tag_set, caplog) -> None:
    reported = []

    async def on_error(tag, exc):
        reported.append((tag.name, str(exc)))

    chains = await parse_output("<msg><boom>kept</boom></msg>", tag_set, on_error=on_error)
    assert chains == [[T("kept")]]
    assert reported == [("boom", "boom")]


@pytest.mark.anyio
async def test_failing_handler_is_logged_without_on_error(tag_set, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="hookchat.tag"):
        assert await parse_output("<boom>kept</boom>", tag_set) == [[T("kept")]]
    assert "tag <boom>" in caplog.text and "RuntimeError" in caplog.text


@pytest.mark.anyio
async def test_failing_on_error_callback_is_swallowed(tag_set, caplog) -> None:
    async def on_error(tag, exc):
        raise ValueError("the reporter is broken too")

    with caplog.at_level(logging.WARNING, logger="hookchat.tag"):
        assert await parse_output("<boom>kept</boom>", tag_set, on_error=on_error) == [[T("kept")]]
    assert "the reporter is broken too" in caplog.text and "tag <boom>" in caplog.text


@pytest.mark.anyio
async def test_handler_returning_junk_degrades_to_text(tag_set) -> None:
    class Junk(BaseTag):
        name = "junk"

        async def handle(self, value, **kwargs):
            return [42]

    class Lenient(BaseTag):
        name = "lenient"

        async def handle(self, value, **kwargs):
            return value.upper()  # a bare str is accepted as text

    tag_set.register(Junk)
    tag_set.register(Lenient)
    assert await parse_output("<junk>a</junk><lenient>b</lenient>", tag_set) == [[T("a"), T("B")]]


@pytest.mark.anyio
async def test_handlers_see_the_event(tag_set) -> None:
    class WhoAsked(BaseTag):
        name = "who"

        async def handle(self, value, **kwargs):
            return [Text(current_event())]

    tag_set.register(WhoAsked)
    assert await parse_output("<who/>", tag_set, event="the event") == [[T("the event")]]
    assert current_event() is None


@pytest.mark.anyio
async def test_without_tag_set_everything_is_text() -> None:
    assert await parse_output("<msg><text>a</text></msg>", None) == [[T("<text>a</text>")]]
