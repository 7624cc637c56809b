"""Hook dispatch: which hooks run, in which order, with which arguments, and when the chain changes."""

from __future__ import annotations

import pytest

from core.chat import KiraEvent, KiraIMMessage, KiraMessageEvent, MessageChain, Session, User
from core.plugin import BasePlugin, EventType, HookEngine, HookRegistrationError, PluginLoader, Priority, on
from core.provider import LLMRequest, LLMResponse
from core.tag import TagSet

pytestmark = pytest.mark.anyio


def test_priority_levels_are_ints_with_higher_running_first() -> None:
    assert [int(p) for p in Priority] == [100, 50, 0, -50, -100]
    assert Priority.SYS_HIGH > Priority.HIGH > Priority.MEDIUM > Priority.LOW > Priority.SYS_LOW
    assert Priority.MEDIUM == 0


@pytest.mark.parametrize("event", [e.value for e in EventType if e is not EventType.CUSTOM_EVENT])
async def test_every_event_has_a_decorator_taking_priority_and_deadline(engine: HookEngine, event: str) -> None:
    decorator = getattr(on, event)

    class Listener:
        @decorator(priority=Priority.HIGH, deadline=2.5)
        async def listen(self, event, *args, **kwargs):
            pass

        @decorator()
        async def defaults(self, event, *args, **kwargs):
            pass

    engine.register(Listener(), name="listener")

    assert [(e.hook_name, e.priority, e.deadline) for e in engine.chain(event)] == [
        ("listen", 50, 2.5),
        ("defaults", 0, engine.default_deadline),
    ]


async def test_custom_event_hooks_listen_to_one_event_name(engine: HookEngine) -> None:
    class Listener:
        @on.custom_event(event_name="score", priority=7, deadline=0.5)
        async def on_score(self, event):
            pass

    engine.register(Listener(), name="listener")

    assert [(e.hook_name, e.priority, e.deadline) for e in engine.chain("custom_event:score")] == [("on_score", 7, 0.5)]
    assert engine.chain("custom_event:other") == ()


async def test_hooks_run_by_descending_priority_then_plugin_id_then_source_order(
    engine: HookEngine, manager: PluginLoader
) -> None:
    calls: list[str] = []

    class Zeta(BasePlugin):
        @on.im_message(priority=Priority.SYS_LOW)
        async def last(self, event):
            calls.append("zeta.last")

        @on.im_message(priority=Priority.HIGH)
        async def high(self, event):
            calls.append("zeta.high")

        @on.im_message()
        async def tie(self, event):
            calls.append("zeta.tie")

        @on.im_message(priority=-1000)
        async def below_everything(self, event):
            calls.append("zeta.below_everything")

    class Alpha(BasePlugin):
        @on.im_message(priority=Priority.LOW)
        async def low(self, event):
            calls.append("alpha.low")

        # Same priority: source order, not alphabetical order (b_tie is defined first).
        @on.im_message(priority=Priority.MEDIUM)
        async def b_tie(self, event):
            calls.append("alpha.b_tie")

        @on.im_message()
        async def a_tie(self, event):
            calls.append("alpha.a_tie")

        @on.im_message(priority=7)
        async def seven(self, event):
            calls.append("alpha.seven")

        @on.im_message(priority=Priority.SYS_HIGH)
        async def first(self, event):
            calls.append("alpha.first")

    manager.add_class(Zeta, "zeta")
    manager.add_class(Alpha, "alpha")
    await manager.load("zeta")  # loaded first, yet ties go to "alpha": the order is by plugin id
    await manager.load("alpha")

    await engine.dispatch("im_message", KiraEvent())

    assert calls == [
        "alpha.first",  # 100
        "zeta.high",  # 50
        "alpha.seven",  # 7
        "alpha.b_tie",  # 0, alpha < zeta, then source order
        "alpha.a_tie",
        "zeta.tie",
        "alpha.low",  # -50
        "zeta.last",  # -100
        "zeta.below_everything",  # -1000
    ]


async def test_hooks_are_called_positionally_whatever_they_name_their_parameters(engine: HookEngine) -> None:
    seen: list[tuple[str, object]] = []

    class Plugin:
        @on.llm_response(priority=3)
        async def named(self, event, resp):
            seen.append(("named", resp))

        @on.llm_response(priority=2)
        async def underscore(self, _, response):
            seen.append(("underscore", response))

        @on.llm_response(priority=1)
        async def variadic(self, event, *args, **kwargs):
            seen.append(("variadic", args))

        @on.llm_request()
        async def inject(self, event, req: LLMRequest, tag_set: TagSet, *args, **kwargs):
            seen.append(("inject", (req, tag_set)))

        @on.im_message()
        async def message(self, event, *args, **kwargs):
            seen.append(("message", args))

    engine.register(Plugin(), name="plugin")
    resp, req, tags = LLMResponse(text_response="hi"), LLMRequest(), TagSet()

    await engine.dispatch("llm_response", KiraEvent(), resp)
    await engine.dispatch("llm_request", KiraEvent(), req, tags)
    await engine.dispatch("im_message", KiraEvent())

    assert seen == [
        ("named", resp),
        ("underscore", resp),
        ("variadic", (resp,)),
        ("inject", (req, tags)),
        ("message", ()),
    ]


def message(text: str) -> KiraMessageEvent:
    return KiraMessageEvent(KiraIMMessage(MessageChain().text(text), User("42"), Session("test", "dm", "42")))


async def test_stop_ends_the_remaining_hooks_of_that_event_only(engine: HookEngine) -> None:
    calls: list[str] = []

    class SpamFilter:
        @on.im_message(priority=Priority.HIGH)
        async def screen(self, event: KiraMessageEvent):
            calls.append("screen")
            if "buy now" in event.message_repr:
                event.stop()

        @on.im_message(priority=Priority.LOW)
        async def reply(self, event: KiraMessageEvent):
            calls.append("reply")

    engine.register(SpamFilter(), name="spam_filter")
    spam = message("buy now!")

    await engine.dispatch("im_message", spam)
    assert calls == ["screen"]
    assert spam.is_stopped

    calls.clear()
    await engine.dispatch("im_message", message("good morning"))
    assert calls == ["screen", "reply"]

    calls.clear()
    await engine.dispatch("im_message", spam)  # a stopped event stays stopped
    assert calls == []


async def test_the_chain_is_cached_until_plugins_change(engine: HookEngine) -> None:
    class First:
        @on.im_message()
        async def first(self, event):
            pass

    class Second:
        @on.im_message(priority=Priority.HIGH)
        async def second(self, event):
            pass

    first = First()
    engine.register(first, name="first")
    chain = engine.chain("im_message")
    await engine.dispatch("im_message", KiraEvent())
    assert engine.chain("im_message") is chain  # dispatching does not rebuild it

    engine.register(Second(), name="second")
    assert [e.hook_name for e in engine.chain("im_message")] == ["second", "first"]

    engine.unregister(first)
    assert [e.hook_name for e in engine.chain("im_message")] == ["second"]


async def test_registering_during_a_dispatch_changes_the_next_dispatch_only(engine: HookEngine) -> None:
    calls: list[str] = []

    class Late:
        @on.im_message(priority=Priority.LOW)
        async def late(self, event):
            calls.append("late")

    class Doomed:
        @on.im_message(priority=Priority.LOW)
        async def doomed(self, event):
            calls.append("doomed")

    doomed = Doomed()

    class Switcher:
        @on.im_message(priority=Priority.HIGH)
        async def switch(self, event):
            calls.append("switch")
            if engine.get_plugin("late") is None:
                engine.register(Late(), name="late")
                engine.unregister(doomed)

    engine.register(Switcher(), name="switcher")
    engine.register(doomed, name="doomed")

    await engine.dispatch("im_message", KiraEvent())
    assert calls == ["switch", "doomed"]  # the running dispatch keeps the chain it started with

    calls.clear()
    await engine.dispatch("im_message", KiraEvent())
    assert calls == ["switch", "late"]


async def test_a_hook_that_is_not_async_is_rejected_when_registered(engine: HookEngine) -> None:
    class Sloppy:
        @on.im_message()
        def on_message(self, event):  # forgot 'async'
            pass

    with pytest.raises(HookRegistrationError) as info:
        engine.register(Sloppy(), name="sloppy_plugin")

    assert "Sloppy.on_message" in str(info.value)
    assert "sloppy_plugin" in str(info.value)
    assert engine.get_plugin("sloppy_plugin") is None
    assert engine.chain("im_message") == ()
