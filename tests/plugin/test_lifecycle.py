"""Plugins at run time: reload, disable, enable and unload, with introspection (`hook_chains()`, `statuses()`)
proving that a stopped plugin leaves nothing behind and takes nothing of another plugin with it."""

from __future__ import annotations

import gc
import os
import sys
import weakref

import pytest

from core.chat.message_utils import KiraCustomEvent, KiraLifecycleEvent
from core.plugin import BasePlugin, PluginContext, PluginLoader, Priority, on, signals
from core.utils.heap import freeze_started

pytestmark = pytest.mark.anyio

VERSIONED = """
    from core.plugin import BasePlugin, on

    class Versioned(BasePlugin):
        @on.custom_event(event_name="ping")
        async def pong(self, event):
            event.data.append("{version}")
"""

SEARCHER = """
    import asyncio

    from core.plugin import BasePlugin, on, register

    class Searcher(BasePlugin):
        async def initialize(self):
            self.worker = self.ctx.spawn(asyncio.Event().wait(), name="index")

        @on.custom_event(event_name="ping")
        async def pong(self, event):
            event.data.append(self.plugin_id)

        @register.tool(name="search", description="search the web",
                       params={{"type": "object", "properties": {{"q": {{"type": "string"}}}}, "required": ["q"]}})
        async def search(self, event, *_, q: str) -> str:
            return "{label}: " + q

        @register.tag(name="shout", description="<shout>text</shout> says it loudly")
        async def shout(self, value: str, **attrs) -> list:
            return []
"""


async def ping(manager: PluginLoader) -> list[str]:
    event = await PluginContext("tests", manager=manager).dispatch_custom("ping", [])
    return event.data


def hook_owners(manager: PluginLoader) -> dict[str, list[str]]:
    return {event: [e["plugin_id"] for e in chain] for event, chain in manager.hook_chains().items()}


async def test_reload_runs_the_code_as_it_is_now_on_disk(
    manager: PluginLoader, write_plugin, record_signal, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as on a user's machine: bytecode caches are written
    main = write_plugin("versioned", VERSIONED.format(version="v1")) / "main.py"
    os.utime(main, (1_700_000_000, 1_700_000_000))
    await manager.load_all()
    assert await ping(manager) == ["v1"]
    unloaded, loaded = record_signal(signals.plugin_unloaded), record_signal(signals.plugin_loaded)

    # An edit saved within the same second, of the same size: a bytecode cache would still look valid.
    write_plugin("versioned", VERSIONED.format(version="v2"))
    os.utime(main, (1_700_000_000, 1_700_000_000))
    status = await manager.reload("versioned")

    assert status.state == "loaded"
    assert await ping(manager) == ["v2"]
    assert hook_owners(manager) == {"custom_event:ping": ["versioned"]}  # replaced, not added twice
    assert unloaded == [{"plugin_id": "versioned"}] and loaded == [{"plugin_id": "versioned"}]


async def test_a_stopped_plugin_keeps_its_bytecode_and_loading_it_again_runs_the_code_on_disk(
    make_manager, write_plugin, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # as on a user's machine: bytecode caches are written
    main = write_plugin("versioned", VERSIONED.format(version="v1")) / "main.py"
    os.utime(main, (1_700_000_000, 1_700_000_000))
    first = make_manager()
    await first.load_all()
    assert await ping(first) == ["v1"]
    await first.shutdown()
    # The next process reads the cache as Python reads any module's, instead of compiling the plugin again.
    [cache] = (main.parent / "__pycache__").glob("main.*.pyc")

    # An edit saved within the same second, of the same size: the cache still looks valid, but this process
    # forgot the plugin, so its next import reads the file.
    write_plugin("versioned", VERSIONED.format(version="v2"))
    os.utime(main, (1_700_000_000, 1_700_000_000))
    second = make_manager()
    await second.load_all()

    assert await ping(second) == ["v2"]
    await second.shutdown()
    assert cache.exists()


async def test_unloading_a_plugin_removes_everything_it_registered_and_nothing_else(
    manager: PluginLoader, write_plugin, record_signal
) -> None:
    write_plugin("searcher_a", SEARCHER.format(label="a"))
    write_plugin("searcher_b", SEARCHER.format(label="b"))
    await manager.load_all()
    a, b = manager.get_plugin("searcher_a"), manager.get_plugin("searcher_b")
    assert await manager.tools.get("search").invoke(None, {"q": "x"}) == "b: x"  # loaded later, shadows a's
    unloaded = record_signal(signals.plugin_unloaded)

    # Both registered tool "search", tag "shout" and hook "pong": unloading a must leave every one of b's.
    await manager.unload("searcher_a")

    assert unloaded == [{"plugin_id": "searcher_a"}]
    assert a.worker.cancelled() and not b.worker.done()
    assert hook_owners(manager) == {"custom_event:ping": ["searcher_b"]}
    assert await ping(manager) == ["searcher_b"]
    assert manager.tools.owner_of("search") == "searcher_b" and manager.tags.owner_of("shout") == "searcher_b"
    assert await manager.tools.get("search").invoke(None, {"q": "x"}) == "b: x"
    assert [s.plugin_id for s in manager.statuses()] == ["searcher_b"]
    assert not [m for m in sys.modules if m.startswith("hookchat_plugins.searcher_a")]

    await manager.unload("searcher_b")

    assert manager.hook_chains() == {} and manager.statuses() == []
    assert len(manager.tools) == 0 and len(manager.tags) == 0
    assert b.worker.cancelled()
    assert await ping(manager) == []


async def test_unloading_the_active_owner_of_a_name_brings_back_the_other_plugins_entry(
    manager: PluginLoader, write_plugin
) -> None:
    write_plugin("searcher_a", SEARCHER.format(label="a"))
    write_plugin("searcher_b", SEARCHER.format(label="b"))
    await manager.load_all()

    await manager.unload("searcher_b")

    assert manager.tools.owner_of("search") == "searcher_a" and manager.tags.owner_of("shout") == "searcher_a"
    assert await manager.tools.get("search").invoke(None, {"q": "x"}) == "a: x"


async def test_disable_stops_a_plugin_and_enable_brings_it_back(
    manager: PluginLoader, write_plugin, record_signal
) -> None:
    write_plugin("searcher_a", SEARCHER.format(label="a"))
    await manager.load_all()
    before = manager.status("searcher_a")
    assert (before.hooks, before.tools, before.tags, before.tasks) == (
        ["custom_event:ping:pong"],
        ["search"],
        ["shout"],
        1,
    )
    unloaded, loaded = record_signal(signals.plugin_unloaded), record_signal(signals.plugin_loaded)

    await manager.disable("searcher_a")

    status = manager.status("searcher_a")
    assert (status.state, status.hooks, status.tools, status.tags, status.tasks) == ("disabled", [], [], [], 0)
    assert manager.hook_chains() == {} and "search" not in manager.tools
    assert await ping(manager) == []
    assert unloaded == [{"plugin_id": "searcher_a"}]

    status = await manager.enable("searcher_a")

    assert (status.state, status.hooks, status.tools, status.tags) == (
        "loaded",
        ["custom_event:ping:pong"],
        ["search"],
        ["shout"],
    )
    assert await ping(manager) == ["searcher_a"]
    assert loaded == [{"plugin_id": "searcher_a"}]


async def test_plugins_the_operator_disabled_are_known_but_not_loaded(make_manager, write_plugin) -> None:
    write_plugin("versioned", VERSIONED.format(version="v1"))
    manager = make_manager(disabled={"versioned"})

    await manager.load_all()

    assert [(s.plugin_id, s.state) for s in manager.statuses()] == [("versioned", "disabled")]
    assert await ping(manager) == []
    await manager.enable("versioned")
    assert await ping(manager) == ["v1"]


async def test_plugins_talk_through_custom_events(manager: PluginLoader) -> None:
    class Scorer(BasePlugin):
        @on.custom_event(event_name="score", priority=Priority.HIGH)
        async def double(self, event: KiraCustomEvent):
            event.data["points"] *= 2

        @on.custom_event(event_name="score")
        async def add_bonus(self, event: KiraCustomEvent):
            event.data["points"] += 1

    class Game(BasePlugin):
        async def award(self, points: int) -> int:
            event = await self.ctx.dispatch_custom("score", {"points": points})
            return event.data["points"]

    manager.add_class(Scorer, "scorer")
    manager.add_class(Game, "game")
    await manager.load_all()

    assert await manager.get_plugin("game").award(10) == 21


async def test_loaded_hooks_hear_when_plugins_are_ready(manager: PluginLoader) -> None:
    heard: list[str | None] = []

    class Watcher(BasePlugin):
        @on.loaded()
        async def ready(self, event: KiraLifecycleEvent):
            heard.append(event.plugin_id)

    manager.add_class(Watcher, "watcher")
    await manager.load_all()

    await manager.dispatch_loaded()
    await manager.dispatch_loaded("watcher")

    assert heard == [None, "watcher"]


async def test_a_plugin_unloaded_after_the_heap_was_frozen_can_still_be_collected(
    manager: PluginLoader, write_plugin
) -> None:
    # `hookchat run` freezes the heap once the bot is up (core/utils/heap.py): frozen objects are never collected,
    # so stopping a plugin must unfreeze it, or every reload would leave the old version in memory for good (as
    # a scan cache keyed by the class once did, frozen or not).
    write_plugin("versioned", VERSIONED.format(version="1"))
    await manager.load_all()
    # The class, not the instance: the instance goes with its last reference, frozen or not; a class is in a cycle
    # (with its module's functions), which only the collector can free.
    plugin_class = weakref.ref(type(manager.get_plugin("versioned")))
    freeze_started()
    try:
        assert gc.get_freeze_count() > 0
        await manager.unload("versioned")
        gc.collect()
        assert plugin_class() is None
    finally:
        gc.unfreeze()
