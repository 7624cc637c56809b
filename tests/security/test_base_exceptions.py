"""No plugin code can end the process: `SystemExit`, `KeyboardInterrupt`, `GeneratorExit` and a `CancelledError`
nobody asked for, raised by a hook, a tool (async or in a thread), a tag handler, a timer, a background task, an
entry or `terminate()`, are that plugin's failure: logged with the plugin, the hook and file:line, reported to
`exception` hooks, and the turn goes on. A real Ctrl-C still propagates (a requested cancellation too:
tests/plugin/test_isolation.py)."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from core.plugin import BasePlugin, on, register
from core.provider import ToolCall
from core.services import timer_interval
from core.testing import ChatHarness, ScriptedProvider
from core.utils.tasks import ContainedBaseException, TaskOwner, must_propagate
from core.utils.tool_utils import FunctionTool

pytestmark = pytest.mark.anyio

RAISED = {
    "SystemExit": lambda: sys.exit(3),
    "KeyboardInterrupt": lambda: (_ for _ in ()).throw(KeyboardInterrupt()),
    "GeneratorExit": lambda: (_ for _ in ()).throw(GeneratorExit()),
    "CancelledError": lambda: (_ for _ in ()).throw(asyncio.CancelledError()),  # nobody cancelled the task
}


class Reporter(BasePlugin):
    """Keeps what `exception` hooks are told."""

    seen: list = []

    @on.exception()
    async def failed(self, event, *_):
        Reporter.seen.append((event.plugin_id, event.hook_name, type(event.error).__name__))


@pytest.mark.parametrize("kind", list(RAISED))
async def test_a_hook_that_raises_a_base_exception_fails_alone_and_the_turn_goes_on(kind, caplog) -> None:
    Reporter.seen = []

    class Quitter(BasePlugin):
        @on.llm_request()
        async def quit(self, event, req, tag_set, *_):
            RAISED[kind]()

    async with ChatHarness([Quitter, Reporter], ScriptedProvider(["<msg>still here</msg>"])) as bot:
        with anyio.fail_after(10):
            replies = await bot.send("hello")

    assert [c.plain_text for c in replies] == ["still here"]
    assert ("quitter", "quit", kind) in Reporter.seen
    [line] = [r.getMessage() for r in caplog.records if "'quitter' hook quit" in r.getMessage()]
    assert f"raised at {__file__}:" in line and kind in line  # plugin, hook, file:line


async def test_a_tool_that_calls_sys_exit_gives_the_model_an_error_result(caplog) -> None:
    def interrupt():  # a synchronous tool: it runs in a worker thread
        raise KeyboardInterrupt

    class Tools(BasePlugin):
        @register.tool("leave", "leaves", {"type": "object", "properties": {}})
        async def leave(self, event, *_, **__):
            sys.exit("bye")

        @on.llm_request()
        async def add(self, event, req, tag_set, *_):
            req.tool_set.add(FunctionTool("interrupt", "interrupts", None, interrupt, pass_event=False))

    provider = ScriptedProvider([[ToolCall("leave", {}), ToolCall("interrupt", {})], "<msg>done</msg>"])
    async with ChatHarness([Tools], provider) as bot:
        with anyio.fail_after(10):
            replies = await bot.send("go")

    assert [c.plain_text for c in replies] == ["done"]
    results = [str(m.content) for m in provider.requests[1].messages if m.role == "tool"]
    assert any("the tool leave failed: SystemExit" in text for text in results)
    assert any("the tool interrupt failed: KeyboardInterrupt" in text for text in results)
    assert any("tool leave (plugin 'tools') raised SystemExit at" in r.getMessage() for r in caplog.records)


async def test_a_tag_handler_that_calls_sys_exit_degrades_to_its_text() -> None:
    class Tags(BasePlugin):
        @register.tag("boom", "explodes")
        async def boom(self, value, **attrs):
            raise SystemExit(1)

    async with ChatHarness([Tags], ScriptedProvider(["<msg>a <boom>b</boom></msg>"])) as bot:
        with anyio.fail_after(10):
            replies = await bot.send("go")

    assert [c.plain_text for c in replies] == ["a b"]


async def test_a_timer_a_background_task_and_terminate_that_exit_are_logged_and_the_app_stays_up(caplog) -> None:
    ticked = asyncio.Event()

    class Background(BasePlugin):
        async def initialize(self):
            self.ctx.spawn(self.leave(), name="leaver")

        async def leave(self):
            raise SystemExit(2)

        async def terminate(self):
            raise KeyboardInterrupt

    class Ticker(BasePlugin):
        @timer_interval(id="tick", seconds=0.01, auto_start=True)
        async def tick(self):
            ticked.set()
            raise SystemExit(4)

    async with ChatHarness([Background, Ticker], ScriptedProvider(["<msg>up</msg>"])) as bot:
        with anyio.fail_after(10):
            await ticked.wait()
            await asyncio.sleep(0.05)  # the timer raised, and the spawned task long since
            assert [c.plain_text for c in await bot.send("still up?")] == ["up"]

    messages = [r.getMessage() for r in caplog.records]
    assert any("background task" in m and "leaver" in m and "failed" in m for m in messages)
    assert any("timer" in m and "SystemExit at" in m for m in messages)
    assert any("'background': terminate() failed" in m for m in messages)


async def test_a_task_that_exits_fails_as_an_ordinary_exception() -> None:
    owner = TaskOwner("test")

    async def leave():
        sys.exit(5)

    task = owner.spawn(leave())
    with pytest.raises(ContainedBaseException) as caught:
        await task
    assert isinstance(caught.value.original, SystemExit) and "SystemExit(5)" in str(caught.value)


def test_a_real_ctrl_c_under_asyncio_run_is_told_apart_from_a_plugins_keyboard_interrupt() -> None:
    # asyncio.run turns a second SIGINT into KeyboardInterrupt raised from its own handler; that one must end the
    # process, while one raised by plugin code must not.
    runner = asyncio.Runner()
    runner._interrupt_count = 1  # the first Ctrl-C cancelled the main task already
    try:
        runner._on_sigint(signal.SIGINT, None, main_task=None)
    except KeyboardInterrupt as exc:
        from_signal = exc
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as exc:
        from_plugin = exc

    assert must_propagate(from_signal)
    assert not must_propagate(from_plugin)
    assert not must_propagate(SystemExit(1))


QUITTER_FOLDER = """
import sys
from core.plugin import BasePlugin, on

class Quitter(BasePlugin):
    @on.im_message()
    async def quit(self, event, *_):
        sys.exit(3)  # a plugin bug, at every message
"""


@pytest.mark.slow
def test_a_hook_calling_sys_exit_in_a_real_hookchat_run_leaves_the_bot_answering(tmp_path) -> None:
    from tests.security.processes import SlowModel, read_replies  # the model server of the crash tests

    folder = tmp_path / "plugins" / "quitter"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text('{"plugin_id": "quitter"}')
    (folder / "main.py").write_text(QUITTER_FOLDER)
    model = SlowModel(delay=0)
    (tmp_path / "hookchat.toml").write_text(f"""
[data]
dir = "data"
[plugins]
dirs = ["plugins"]
[[providers]]
name = "fake"
type = "openai"
base_url = "{model.url}"
models = ["m"]
max_retries = 0
[server]
port = 0
token = "t"
""")
    env = {
        "PATH": "/usr/bin:/bin",
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "HOME": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "core.cli", "run"],
        cwd=tmp_path,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        replies: list[str] = []
        for i, text in enumerate(["hello", "still there?"], 1):
            process.stdin.write(text + "\n")
            process.stdin.flush()
            read_replies(process, i, replies)
        assert replies == ["answer: hello", "answer: still there?"]
        assert process.poll() is None, "the bot is still running"
        _, err = process.communicate(timeout=30)  # closes stdin: the console leaves, the bot stops normally
    finally:
        process.kill()
        process.wait()
        model.close()

    assert process.returncode == 0, err
    assert err.count("plugin 'quitter' hook quit (im_message) raised at") == 2 and "SystemExit" in err
