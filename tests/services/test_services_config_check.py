"""A plugin's config field is checked without jsonschema when its check is a plain type, bounds, lengths and
`items`; that shortcut must never accept a value jsonschema refuses, and what it cannot judge still gets
jsonschema's message."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from core.services import PluginConfigError, validate_config
from core.services._schema import _plainly_fits

JSON_TYPES = ["string", "integer", "number", "boolean", "array", "object", "null"]
numbers = st.one_of(st.integers(-5, 5), st.floats(-5, 5, allow_nan=False), st.booleans())
scalars = st.one_of(st.none(), st.booleans(), st.integers(-10, 10), st.floats(-10, 10), st.text(max_size=4))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=2), inner))
checks = st.recursive(
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(JSON_TYPES),
            "minimum": numbers,
            "maximum": numbers,
            "exclusiveMinimum": numbers,
            "exclusiveMaximum": numbers,
            "minLength": st.integers(0, 3),
            "maxLength": st.integers(0, 3),
        },
    ),
    lambda inner: st.fixed_dictionaries({"type": st.just("array"), "items": inner}),
)


@settings(max_examples=500)
@given(checks, st.one_of(scalars, values))
def test_the_shortcut_accepts_only_what_jsonschema_accepts(check, value):
    if _plainly_fits(check, value):
        assert list(Draft202012Validator(check).iter_errors(value)) == []


@pytest.mark.parametrize(
    ("check", "value"),
    [
        ({"type": "string", "minLength": 2}, "a"),
        ({"maxLength": 1}, "ab"),
        ({"minimum": 3}, 1),
        ({"maximum": 3}, 4.5),
        ({"exclusiveMinimum": 1}, 1),
        ({"exclusiveMaximum": 1}, 1),
        ({"type": "integer"}, True),
        ({"type": "number"}, False),
        ({"type": "boolean"}, 0),
        ({"type": "array", "items": {"type": "string"}}, ["a", 1]),
        ({"type": "object"}, []),
    ],
)
def test_the_shortcut_never_passes_a_value_jsonschema_refuses(check, value):
    assert list(Draft202012Validator(check).iter_errors(value)) != []
    assert not _plainly_fits(check, value)


def test_a_value_the_shortcut_cannot_judge_still_gets_jsonschemas_message():
    schema = {"mode": {"type": "string", "options": ["a", "b"], "default": "a"}, "n": {"type": "integer"}}
    assert validate_config("p", schema, {"mode": "a", "n": 3}) == {"mode": "a", "n": 3}
    for values, expected in (({"mode": "c"}, "'c' is not one of ['a', 'b']"), ({"n": True}, "is not of type")):
        try:
            validate_config("p", schema, values)
        except PluginConfigError as exc:
            assert expected in str(exc)
        else:
            raise AssertionError(f"{values} was accepted")
