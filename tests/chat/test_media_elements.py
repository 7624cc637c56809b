"""The media elements (`Image`, `Sticker`, `Record`, `File`, `Video`) as plugins use them: made from a source, equal
when of one kind with one source, printed with their kind, copied with `dataclasses.replace`."""

from __future__ import annotations

import dataclasses

import pytest

from core.chat.message_elements import File, Image, Record, Sticker, Video

KINDS = [Sticker, Record, File, Video]


@pytest.mark.parametrize("kind", KINDS)
def test_a_media_element_is_equal_to_one_of_its_kind_with_the_same_source(kind):
    element = kind(url="https://example.org/a", name="a")
    assert element == kind(url="https://example.org/a", name="a")
    assert element != kind(url="https://example.org/b", name="a")
    assert all(
        element != other(url="https://example.org/a", name="a") for other in (*KINDS, Image) if other is not kind
    )
    assert repr(element).startswith(f"{kind.__name__}(url='https://example.org/a'")


@pytest.mark.parametrize("kind", KINDS)
def test_a_media_element_is_a_dataclass_of_its_kind(kind):
    element = kind(path="/tmp/a.bin")
    assert dataclasses.is_dataclass(kind)
    assert [f.name for f in dataclasses.fields(element) if f.init] == ["url", "path", "base64", "name", "mime"]
    copy = dataclasses.replace(element, name="renamed")
    assert type(copy) is kind and copy.path == "/tmp/a.bin" and copy.name == "renamed"
    assert kind.__hash__ is None  # mutable, compared by value: not hashable, as a dataclass with eq=True
