"""`BaseTag`, `FunctionTag` and `TagSet`: registering, replacing, looking up, and the prompt that teaches the model
the output protocol."""

from __future__ import annotations

import pytest
from sample_tags import ActTag, AtTag, TextTag

from core.chat.message_elements import Text
from core.tag import BaseTag, FunctionTag, TagDefinitionError, TagSet, parse_output


def test_register_lookup_and_iterate() -> None:
    tags = TagSet()
    text = tags.register(TextTag)  # a class is instantiated without ctx
    at = tags.register(AtTag(ctx=None))
    assert isinstance(text, TextTag)
    assert tags.get("TEXT") is text and "at" in tags and "At" in tags and at in tags
    assert tags.names() == ["text", "at"]
    assert list(tags) == [text, at] and len(tags) == 2 and tags
    assert tags.unregister("Text") is text and tags.unregister("text") is None
    assert tags.names() == ["at"]


def test_same_name_replaces_so_a_request_tag_overrides_a_global_one() -> None:
    global_tags = TagSet([TextTag])

    class LoudText(BaseTag):
        name = "text"

        async def handle(self, value, **kwargs):
            return [Text(value.upper())]

    request_tags = global_tags.copy()
    loud = request_tags.register(LoudText)
    assert request_tags.get("text") is loud
    assert isinstance(global_tags.get("text"), TextTag)  # the copy did not touch the global set


@pytest.mark.parametrize("name", ["", "1abc", "has space", "a<b", "msg", "THINK", "reasoning", "x" * 65])
def test_bad_names_are_refused(name: str) -> None:
    class Bad(BaseTag):
        pass

    Bad.name = name
    with pytest.raises(TagDefinitionError):
        Bad()


def test_only_tags_can_be_registered() -> None:
    with pytest.raises(TagDefinitionError):
        TagSet().register(object())  # type: ignore[arg-type] - the wrong type is the point
    with pytest.raises(TagDefinitionError):
        TagSet().register(dict)  # type: ignore[arg-type] - the wrong type is the point


def test_owner_is_the_plugin_id_of_ctx() -> None:
    class Ctx:
        plugin_id = "weather"

    assert TextTag(ctx=Ctx()).owner == "weather"
    assert TextTag().owner is None


@pytest.mark.anyio
async def test_function_tag_wraps_async_and_sync_handlers() -> None:
    async def shout(value, **attrs):
        return [Text(value.upper() + attrs.get("end", ""))]

    def whisper(value, **attrs):  # sync: run in a worker thread
        return [Text(value.lower())]

    tags = TagSet([FunctionTag("shout", "shout it", shout), FunctionTag("whisper", "whisper it", whisper)])
    chains = await parse_output('<msg><shout end="!">hi</shout><whisper>HO</whisper></msg>', tags)
    assert chains == [[Text("HI!"), Text("ho")]]


def test_to_prompt_teaches_the_protocol() -> None:
    prompt = TagSet([TextTag, AtTag, ActTag]).to_prompt()
    assert "<msg>" in prompt
    assert "- <text>: plain text" in prompt
    assert '- <at>: mention a user: <at id="USER_ID"/>' in prompt
    assert "<act> may also stand alone outside a <msg> block" in prompt
    assert "escape" in prompt
    assert "<msg>" in TagSet().to_prompt()


def test_multiline_descriptions_become_one_line() -> None:
    class Multi(BaseTag):
        name = "multi"
        description = "first line\n   second line"

    assert "- <multi>: first line second line" in TagSet([Multi]).to_prompt().splitlines()
