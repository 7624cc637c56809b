"""Matrix content both ways without a homeserver: the text of a reply without its quoted fallback, what counts as a
mention of the bot, and the events a chain becomes (text with pills, media on their own, links for URLs, splits)."""

from __future__ import annotations

from core.adapter.matrix import mentions, plan_events, replied_to, text_of
from core.adapter.matrix._content import MediaPart, TextPart, split_text
from core.chat.message_elements import At, Image, Reply, Text

BOT = "@bot:example.org"


def test_the_quoted_fallback_of_a_reply_is_not_part_of_its_text():
    content = {"body": "> <@ann:x> one\n> two\n\nthree", "m.relates_to": {"m.in_reply_to": {"event_id": "$1"}}}
    assert replied_to(content) == "$1" and text_of(content) == "three"
    assert text_of({"body": "> a quote I wrote myself"}) == "> a quote I wrote myself"  # not a reply: kept


def test_a_mention_is_the_declared_one_when_the_client_declares_any():
    assert mentions({"body": "hi", "m.mentions": {"user_ids": [BOT]}}, BOT, "Bot")
    assert not mentions({"body": "Bot, hi", "m.mentions": {}}, BOT, "Bot")  # declared: nobody
    assert mentions({"body": "Bot: hi"}, BOT, "Bot")  # an older client: the display name as a word
    assert not mentions({"body": "robots everywhere"}, BOT, "bot")
    assert mentions({"body": "x", "formatted_body": '<a href="https://matrix.to/#/@bot:example.org">x</a>'}, BOT, None)
    assert not mentions({"body": "@room hello", "m.mentions": {"room": True}}, BOT, "Bot")


def test_media_are_events_of_their_own_and_a_url_is_sent_as_a_link():
    parts = plan_events(
        [
            Reply("$q"),
            Text("see "),
            Image(path="/tmp/a.png"),
            Text("and "),
            Image(url="https://example.org/b.png"),
            Image(url="mxc://example.org/c"),
        ]
    )
    assert [type(p) for p in parts] == [TextPart, MediaPart, TextPart, MediaPart]
    assert parts[0].reply_to == "$q" and parts[1].reply_to is None and parts[1].msgtype == "m.image"
    assert parts[2].body == "and https://example.org/b.png"  # not fetched: the model wrote it
    assert parts[3].element.url == "mxc://example.org/c"
    assert parts[0].content()["m.mentions"] == {}  # declared empty, so no client guesses from the text
    assert plan_events([Text("   ")]) == []


def test_long_text_is_split_at_spaces_keeping_mentions_on_the_first_piece():
    (part,) = plan_events([At("all"), Text(" " + "word " * 50)])
    pieces = split_text(part, 100)
    assert len(pieces) == 3 and all(len(p.body) <= 100 for p in pieces)
    assert "".join(p.body for p in pieces) == part.body
    assert pieces[0].room and not pieces[1].room
