"""Nothing hangs: a tag handler, a synchronous tool and a hook that ignores its cancellation each have a deadline;
past it the turn goes on, the fault is logged with its owner's name, and shutdown never waits for it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
from pathlib import Path

import anyio
import pytest

from core.chat import KiraMessageBatchEvent, KiraMessageEvent
from core.chat.message_elements import Text
from core.plugin import BasePlugin, on
from core.provider import ToolCall
from core.tag import BaseTag, FunctionTag
from core.testing import ChatHarness, ScriptedProvider
from core.utils import signals
from core.utils.tool_utils import FunctionTool

pytestmark = pytest.mark.anyio


class Hangs(BaseTag):
    name = "weather"
    description = "the weather"
    timeout = 0.1

    async def handle(self, value: str, **kwargs) -> list:
        await asyncio.Event().wait()  # never set
        return [Text("never")]


def _offering_tag(tag: BaseTag) -> type[BasePlugin]:
    class Offers(BasePlugin):
        @on.llm_request()
        async def add(self, event, req, tag_set, *_):
            tag_set.register(tag)

    return Offers


async def test_a_hanging_tag_handler_degrades_to_its_text_and_the_turn_ends(caplog) -> None:
    provider = ScriptedProvider(["<msg>Today: <weather>sunny</weather></msg>"])

    async with ChatHarness([_offering_tag(Hangs())], provider) as bot:
        with anyio.fail_after(10):  # without a deadline the turn would never end
            replies = await bot.send("weather?")

    assert [c.message_repr for c in replies] == ["Today: sunny"]
    assert any("<weather>" in r.getMessage() and "failed" in r.getMessage() for r in caplog.records)


async def test_a_blocking_sync_tag_handler_is_abandoned_and_its_thread_left_to_finish(caplog) -> None:
    release, finished = threading.Event(), threading.Event()

    def slow(value: str, **attrs):
        release.wait(30)
        finished.set()
        return [Text("late")]

    tag = FunctionTag("slow", "blocks", slow)
    tag.timeout = 0.1
    provider = ScriptedProvider(["<msg>a <slow>x</slow> b</msg>"])
    async with ChatHarness([_offering_tag(tag)], provider) as bot:
        replies = await bot.send("go")
        done_before_release = finished.is_set()
        release.set()

    assert [c.message_repr for c in replies] == ["a x b"]
    assert not done_before_release
    assert any("tag <slow>" in r.getMessage() and "abandoned" in r.getMessage() for r in caplog.records)


async def test_a_sync_tool_is_abandoned_at_its_timeout_and_the_leak_logged(caplog) -> None:
    release, finished = threading.Event(), threading.Event()

    def crunch():
        release.wait(30)
        finished.set()
        return "crunched"

    tool = FunctionTool("crunch", "Crunches", None, crunch, timeout=0.1, pass_event=False)

    class Slow(BasePlugin):
        @on.llm_request()
        async def add(self, event, req, tag_set, *_):
            req.tool_set.add(tool)

    provider = ScriptedProvider([[ToolCall("crunch", {})], "<msg>it took too long</msg>"])
    async with ChatHarness([Slow], provider) as bot:
        replies = await bot.send("crunch")
        done_before_release = finished.is_set()
        release.set()

    assert [c.message_repr for c in replies] == ["it took too long"]
    assert not done_before_release
    tool_text = [m.content for m in provider.requests[-1].messages if m.role == "tool"][0]
    assert "did not answer within 0.1 s" in tool_text
    assert any("'crunch'" in r.getMessage() and "abandoned" in r.getMessage() for r in caplog.records)


async def test_a_hook_that_swallows_cancellation_is_reported_its_plugin_marked_faulty_and_shutdown_proceeds(
    caplog,
) -> None:
    release = asyncio.Event()
    failures: list[dict] = []

    def on_failure(sender, **kwargs):
        failures.append(kwargs)

    class Stubborn(BasePlugin):
        @on.im_batch_message(deadline=0.1)
        async def stubborn(self, event, *_):
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # the fault under test: the deadline's cancellation is swallowed, again and again

    signals.hook_failed.connect(on_failure)
    provider = ScriptedProvider(["<msg>hi</msg>"])
    bot = ChatHarness([Stubborn], provider)
    try:
        await bot.__aenter__()
        message = bot.message("hello")
        bot.app.submit(KiraMessageBatchEvent([KiraMessageEvent(message)], message.session))
        with anyio.fail_after(10):
            while "stubborn" not in bot.app.engine.faulty:
                await asyncio.sleep(0.05)
        status = bot.app.plugins.status("stubborn")
        with anyio.fail_after(30):  # the stuck turn must not hold up the shutdown
            await bot.__aexit__(None, None, None)
    finally:
        signals.hook_failed.disconnect(on_failure)
        release.set()
        await asyncio.sleep(0)

    assert status.state == "error" and "ignored its cancellation" in status.reason
    assert any(f["plugin_id"] == "stubborn" and f["hook_name"] == "stubborn" for f in failures)
    assert any("is faulty" in r.getMessage() for r in caplog.records)
    assert any("abandoned" in r.getMessage() for r in caplog.records)


async def test_a_session_goes_on_to_its_next_turn_after_a_hook_that_swallows_its_cancellation(caplog) -> None:
    release = asyncio.Event()

    class Stubborn(BasePlugin):
        @on.im_batch_message(deadline=0.1)
        async def stubborn(self, event, *_):
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    pass  # swallowed, again and again

    # One turn at a time in the whole bot: the abandoned turn must also give back its slot.
    config = {"limits": {"max_concurrent_turns": 1}}
    async with ChatHarness([Stubborn], ScriptedProvider(["<msg>next turn</msg>"]), config=config) as bot:
        try:
            first, second = bot.message("one"), bot.message("two")
            stuck = bot.app.submit(KiraMessageBatchEvent([KiraMessageEvent(first)], first.session))
            after = bot.app.submit(KiraMessageBatchEvent([KiraMessageEvent(second)], second.session))
            with anyio.fail_after(10):
                result = await after  # queued behind the stuck turn of the same session
            assert stuck.cancelled(), "the stuck turn was abandoned"
            assert [c.plain_text for c in result.chains] == ["next turn"]
            assert not bot.app.scheduler.is_busy(first.session.sid)
            status = bot.app.plugins.status("stubborn")
            assert status.state == "error" and "ignored its cancellation" in status.reason
        finally:
            release.set()
    assert any("abandoned" in r.getMessage() and "goes on" in r.getMessage() for r in caplog.records)


STUBBORN_FOLDER = """
import asyncio
from core.plugin import BasePlugin, on

class Stubborn(BasePlugin):
    @on.im_batch_message(deadline=0.1)
    async def stubborn(self, event, *_):
        for _ in range(100):  # swallows its cancellation for 5 s, then gives up
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                pass
"""


async def test_hookchat_plugins_shows_a_plugin_faulty_in_an_earlier_run(tmp_path) -> None:
    folder = tmp_path / "plugins" / "stubborn"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text('{"plugin_id": "stubborn"}')
    (folder / "main.py").write_text(STUBBORN_FOLDER)
    (tmp_path / "hookchat.toml").write_text(
        '[data]\ndir = "data"\n[plugins]\ndirs = ["plugins"]\n[adapters]\nconsole = false\n'
    )
    config = {"data": {"dir": str(tmp_path / "data")}, "plugins": {"dirs": [str(tmp_path / "plugins")]}}
    async with ChatHarness(provider=ScriptedProvider(["<msg>x</msg>"]), config=config) as bot:
        message = bot.message("hello")
        bot.app.submit(KiraMessageBatchEvent([KiraMessageEvent(message)], message.session))
        with anyio.fail_after(10):
            while bot.app.plugins.status("stubborn").fault is None:
                await asyncio.sleep(0.05)

    listed = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "core.cli", "plugins"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    )

    assert listed.returncode == 1, listed.stderr
    [line] = [line for line in listed.stdout.splitlines() if "faulty:" in line]
    assert "hook stubborn (im_batch_message) ignored its cancellation" in line

    (folder / "main.py").write_text(STUBBORN_FOLDER + "\n# fixed\n")  # a changed plugin starts with a clean slate
    listed = await anyio.to_thread.run_sync(
        lambda: subprocess.run(
            [sys.executable, "-m", "core.cli", "plugins"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        )
    )
    assert listed.returncode == 0 and "faulty:" not in listed.stdout, listed.stdout
