"""The events table: `EventType` is the one place an event is declared, and the decorators, the dispatch names
and the events list of docs/plugins.md follow from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.chat import KiraEvent
from core.plugin import EventType, HookEngine, UnknownEventError, custom_event_name, events_table, on

pytestmark = pytest.mark.anyio

PLUGINS_PAGE = Path(__file__).resolve().parents[2] / "docs" / "plugins.md"


def test_the_events_list_of_the_docs_is_the_one_the_table_gives() -> None:
    # When this fails after adding an event, paste `core.plugin.events_table()` over the table in docs/plugins.md.
    assert events_table() in PLUGINS_PAGE.read_text(encoding="utf-8")


def test_every_row_of_the_table_has_its_decorator_documented_from_the_row() -> None:
    for event in EventType:
        if event is EventType.CUSTOM_EVENT:
            continue
        decorator = getattr(on, event.value)
        assert event.signature in decorator.__doc__
        assert decorator.__name__ == event.value


def test_type_checkers_and_editors_see_one_decorator_per_row_of_the_table() -> None:
    # `on.<event>` is made at run time; its declarations are what pyright and editors complete and check. After
    # adding an event, declare `<event>: HookDecorator` in `_On` (core/plugin/_decorators.py).
    declared = set(type(on).__annotations__)
    assert declared == {e.value for e in EventType if e is not EventType.CUSTOM_EVENT}


def test_hooks_are_called_with_the_arguments_the_table_names() -> None:
    assert EventType.LLM_REQUEST.parameters == ("event", "req", "tag_set")
    assert EventType.IM_MESSAGE.parameters == ("event",)


async def test_a_misspelt_dispatch_name_raises_with_the_nearest_event(engine: HookEngine) -> None:
    with pytest.raises(UnknownEventError, match="did you mean 'im_message'"):
        await engine.dispatch("im_mesage", KiraEvent())


async def test_every_spelling_of_an_event_reaches_the_same_hooks(engine: HookEngine) -> None:
    calls: list[str] = []

    class Listener:
        @on.im_message()
        async def heard(self, event, *args, **kwargs):
            calls.append("im_message")

        @on.custom_event("score")
        async def scored(self, event, *args, **kwargs):
            calls.append("score")

    engine.register(Listener(), name="listener")
    await engine.dispatch("im_message", KiraEvent())
    await engine.dispatch(EventType.IM_MESSAGE, KiraEvent())
    await engine.dispatch(EventType.IM_MESSAGE.value, KiraEvent())
    await engine.dispatch(custom_event_name("score"), KiraEvent())
    await engine.dispatch(custom_event_name("nobody listens"), KiraEvent())  # a custom event may have no hooks

    assert calls == ["im_message", "im_message", "im_message", "score"]


@pytest.mark.parametrize("name", ["custom_event", "custom_event:", "IM_MESSAGE", ""])
async def test_names_that_no_hook_can_listen_to_raise(engine: HookEngine, name: str) -> None:
    with pytest.raises(UnknownEventError):
        await engine.dispatch(name, KiraEvent())
