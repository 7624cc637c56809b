"""Entries other plugins call: static and dynamic entries, enabling and disabling, entry hooks, cross-plugin calls,
and every failure as an `Err`."""

import asyncio

import pytest

from core.plugin import BasePlugin
from core.services import Err, Ok, entry_hook, plugin_entry, unwrap
from core.testing import ChatHarness

pytestmark = pytest.mark.anyio


class Worker(BasePlugin):
    @plugin_entry(
        id="do_work",
        description="Doubles a number",
        input_schema={"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]},
    )
    async def do_work(self, n: int):
        return {"doubled": n * 2}

    @plugin_entry(id="fail")
    async def fail(self):
        raise RuntimeError("broken")

    @plugin_entry(id="slow", timeout=0.05)
    async def slow(self):
        await asyncio.sleep(10)

    @plugin_entry(id="refuse")
    def refuse(self):  # a sync entry runs in a worker thread
        return Err("not today")


class Caller(BasePlugin):
    pass


async def call(bot, target, args=None, **kw):
    return await bot.plugin("caller").plugins.call_entry(target, args, **kw)


async def test_calling_another_plugins_entries():
    async with ChatHarness(plugins=[Worker, Caller], builtins=()) as bot:
        assert await call(bot, "worker:do_work", {"n": 21}) == Ok({"doubled": 42})
        assert (await call(bot, "worker:do_work", {"n": "x"})).error.code == "invalid_argument"
        failed = await call(bot, "worker:fail")
        assert isinstance(failed, Err) and "RuntimeError: broken" in str(failed.error)
        assert "did not finish within 0.05 s" in str((await call(bot, "worker:slow")).error)
        assert await call(bot, "worker:refuse") == Err("not today")
        assert (await call(bot, "worker:nothing")).error.code == "entry_not_found"
        assert (await call(bot, "ghost:do_work")).error.code == "plugin_unavailable"
        assert (await call(bot, "no-colon")).error.code == "invalid_argument"
        plugins = bot.plugin("caller").plugins
        assert unwrap(await plugins.list_ids()) == ["caller", "worker"]
        assert unwrap(await plugins.exists("worker")) is True and unwrap(await plugins.exists("ghost")) is False
        assert unwrap(await plugins.require_enabled("worker"))["enabled"] is True
        assert isinstance(await plugins.call_entry_json("worker:refuse"), Err)
        await bot.app.plugins.disable("worker")
        assert unwrap(await plugins.list_ids(enabled=False)) == ["worker"]
        refused = await plugins.require_enabled("worker")
        assert isinstance(refused, Err) and "is disabled" in str(refused.error)


async def test_dynamic_entries_can_be_added_listed_disabled_and_removed():
    async with ChatHarness(plugins=[Worker, Caller], builtins=()) as bot:
        worker = bot.plugin("worker")
        assert (
            worker.register_dynamic_entry(
                "greet", lambda name="World", **_: Ok({"msg": f"Hi {name}"}), name="Greet", description="A greeting"
            )
            is True
        )
        assert worker.register_dynamic_entry("do_work", lambda: None) is False, "a static id is not replaced"
        ids = [e["id"] for e in worker.list_entries()]
        assert ids == ["do_work", "fail", "greet", "refuse", "slow"]
        assert await call(bot, "worker:greet", {"name": "Ann"}) == Ok({"msg": "Hi Ann"})
        assert worker.disable_entry("greet") is True
        assert "greet" not in [e["id"] for e in worker.list_entries()]
        assert "greet" in [e["id"] for e in worker.list_entries(include_disabled=True)]
        assert (await call(bot, "worker:greet")).error.code == "entry_disabled"
        assert worker.enable_entry("greet") is True and worker.enable_entry("ghost") is False
        assert worker.unregister_dynamic_entry("greet") is True
        assert worker.unregister_dynamic_entry("do_work") is False, "static entries stay"
        assert (await call(bot, "worker:greet")).error.code == "entry_not_found"


async def test_entry_hooks_run_around_the_entry_in_priority_order():
    log = []

    class Hooked(BasePlugin):
        @plugin_entry(id="add")
        async def add(self, a: int, b: int):
            log.append("entry")
            return a + b

        @plugin_entry(id="other")
        async def other(self):
            return "other"

        @entry_hook(target="add", timing="before", priority=10)
        async def double_a(self, entry_id, args):
            log.append("before")
            return {**args, "a": args["a"] * 2}

        @entry_hook(target="add", timing="around")
        async def around(self, entry_id, args, call_next):
            log.append("around-in")
            result = await call_next(args)
            log.append("around-out")
            return result

        @entry_hook(target="*", timing="after")
        async def tag(self, entry_id, args, result):
            log.append(f"after-{entry_id}")
            return Ok({"value": result.value}) if isinstance(result, Ok) else None

        @entry_hook(target="other", timing="replace")
        async def replaced(self, entry_id, args):
            return "replaced"

    async with ChatHarness(plugins=[Hooked, Caller], builtins=()) as bot:
        assert await call(bot, "hooked:add", {"a": 2, "b": 1}) == Ok({"value": 5})
        assert await call(bot, "hooked:other") == Ok({"value": "replaced"})
    assert log == ["before", "around-in", "entry", "around-out", "after-add", "after-other"]


async def test_a_before_hook_can_refuse_the_call():
    class Guarded(BasePlugin):
        @plugin_entry(id="secret")
        async def secret(self):
            return "the secret"

        @entry_hook(timing="before")
        async def guard(self, entry_id, args):
            return Err("denied")

    async with ChatHarness(plugins=[Guarded, Caller], builtins=()) as bot:
        assert await call(bot, "guarded:secret") == Err("denied")
