"""Stopping a plugin removes, in one step, everything it registered: tools (local, and remote ones registered for
it), timers, tasks, entries; its store and database close. Another plugin's things stay."""

import asyncio

import pytest

from core.plugin import BasePlugin, register
from core.services import Err, SdkError, llm_tool, plugin_entry, timer_interval
from core.testing import ChatHarness, ScriptedProvider
from tests.server.registry_helpers import registration, registry_bot

pytestmark = pytest.mark.anyio


class Busy(BasePlugin):
    async def initialize(self):
        self.ticks = 0
        self.ticked = asyncio.Event()
        self.register_llm_tool("busy_dynamic", "d", None, lambda: "x")
        self.register_dynamic_entry("dyn", lambda: 1)
        self.sleeper = self.ctx.spawn(asyncio.sleep(3600), name="sleeper")
        await self.store.set("k", "v")

    @llm_tool(name="busy_tool", description="d")
    async def busy_tool(self):
        return "x"

    @register.tool("busy_legacy", "d", {"type": "object", "properties": {}})
    async def busy_legacy(self, event, *_):
        return "x"

    @timer_interval(id="tick", seconds=0.01)
    async def tick(self):
        self.ticks += 1
        self.ticked.set()

    @plugin_entry(id="work")
    async def work(self):
        return "done"


class Bystander(BasePlugin):
    @llm_tool(name="bystander_tool", description="stays")
    async def bystander_tool(self):
        return "y"


async def test_a_stopped_plugin_leaves_no_tool_timer_task_or_entry_behind(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path, plugins=[Busy, Bystander]) as (bot, server):
        tools, registry = bot.app.plugins.tools, server.registry
        await registry.register(registration("busy_remote", "http://127.0.0.1:9/cb", source="plugin:busy"))
        await registry.register(registration("other_remote", "http://127.0.0.1:9/cb", source="plugin:bystander"))
        busy = bot.plugin("busy")
        ctx, services = busy.ctx, busy.services
        assert sorted(tools.by_owner("busy")) == ["busy_dynamic", "busy_legacy", "busy_tool"]
        assert "busy_remote" in tools
        await asyncio.wait_for(busy.ticked.wait(), 10)  # the timer runs
        timer_tasks = services.timers.tasks
        assert timer_tasks and busy.sleeper in ctx.tasks
        assert bot.app.plugins.status("busy").tasks == 2

        await bot.app.plugins.disable("busy")

        assert tools.by_owner("busy") == {} and tools.by_owner("remote:plugin:busy") == {}
        assert registry.list("plugin:busy") == [], "remote registrations for the plugin are cleared too"
        assert ctx.tasks == frozenset() and busy.sleeper.cancelled()
        assert all(task.done() for task in timer_tasks)
        assert services.entries.list(include_disabled=True) == []
        assert isinstance(await services.store.get("k"), Err), "its store is closed"
        caller = bot.plugin("bystander")
        assert (await caller.plugins.call_entry("busy:work")).error.code == "plugin_unavailable"
        assert "bystander_tool" in tools and "other_remote" in tools, "other plugins keep theirs"


async def test_a_plugin_that_fails_to_initialise_leaves_nothing_behind(tmp_path):
    spawned = []

    class Broken(BasePlugin):
        async def initialize(self):
            self.register_llm_tool("half_done", "d", None, lambda: "x")
            spawned.append(self.ctx.spawn(asyncio.sleep(3600)))
            raise RuntimeError("cannot start")

    async with registry_bot(ScriptedProvider(), tmp_path, plugins=[Broken], allow_failed=True) as (bot, server):
        assert bot.app.plugins.status("broken").state == "error"
        assert "half_done" not in bot.app.plugins.tools
        [task] = spawned
        assert task.cancelled(), "its task was cancelled, not left running"


class Refresher(BasePlugin):
    """Re-registers a runtime-built tool on every tick (seed 002's use of register_llm_tool), and tries to register
    more while it stops."""

    async def initialize(self):
        self.refused: dict[str, str] = {}
        self.ticked_while_stopping = asyncio.Event()

    @timer_interval(id="refresh", seconds=0.01)
    async def refresh(self):
        try:
            self.register_llm_tool("discovered", "d", None, lambda: "fresh")
        except SdkError as exc:
            self.refused["timer tick"] = exc.code
            self.ticked_while_stopping.set()

    async def terminate(self):
        await asyncio.wait_for(self.ticked_while_stopping.wait(), 10)  # a tick ran while the plugin was stopping
        attempts = {
            "tool": lambda: self.register_llm_tool("late", "d", None, lambda: "x"),
            "entry": lambda: self.register_dynamic_entry("late", lambda: 1),
            "timer": lambda: self.start_timer("refresh"),
        }
        for what, attempt in attempts.items():
            try:
                attempt()
            except SdkError as exc:
                self.refused[what] = exc.code
        self.receipt = self.push_message(
            source="bye", session="test:dm:user", parts=[{"type": "text", "text": "going"}]
        )


async def test_a_stopping_plugin_cannot_register_anything_and_leaves_nothing_behind():
    async with ChatHarness(plugins=[Refresher], builtins=()) as bot:
        plugin = bot.plugin("refresher")
        tools = bot.app.plugins.tools
        ctx = plugin.ctx
        await bot.app.plugins.unload("refresher")
        assert plugin.refused == {
            "timer tick": "plugin_stopped",
            "tool": "plugin_stopped",
            "entry": "plugin_stopped",
            "timer": "plugin_stopped",
        }
        assert plugin.receipt == {"submitted": False, "ok": False, "reason": "transport_unavailable"}
        assert tools.by_owner("refresher") == {} and "discovered" not in tools and "late" not in tools
        assert ctx.tasks == frozenset() and plugin.services.entries.list(include_disabled=True) == []
        await bot.app.push.join()
        assert bot.sent == []


async def test_a_reloaded_plugin_gets_its_tools_and_timers_again(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path, plugins=[Busy]) as (bot, server):
        await bot.app.plugins.disable("busy")
        await bot.app.plugins.enable("busy")
        busy = bot.plugin("busy")
        assert sorted(bot.app.plugins.tools.by_owner("busy")) == ["busy_dynamic", "busy_legacy", "busy_tool"]
        await asyncio.wait_for(busy.ticked.wait(), 10)
        assert [t["running"] for t in busy.list_timers()] == [True]
