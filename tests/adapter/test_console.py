"""The console adapter as a person uses it: replies, the built-in commands, why nothing came back, streaming with a
typing indicator, Ctrl-C that stops only the answer, and characters the terminal cannot show."""

from __future__ import annotations

import asyncio
import io
import os

import anyio
import pytest

from core.adapter.console import CONSOLE_HELP, ConsoleAdapter
from core.app import HookChat
from core.config import HookchatConfig
from core.plugin import BasePlugin, on
from core.provider import LLMRequest, LLMResponse
from core.testing import ScriptedProvider

pytestmark = pytest.mark.anyio


class Out(io.StringIO):
    """A terminal stand-in with a chosen encoding."""

    def __init__(self, encoding: str = "utf-8") -> None:
        super().__init__()
        self._encoding = encoding

    @property
    def encoding(self) -> str:  # type: ignore[override] - read-only here, an attribute on TextIOWrapper
        return self._encoding


def bot(
    tmp_path, provider, *, out=None, interactive=False, plugins=(), builtins=None
) -> tuple[HookChat, ConsoleAdapter]:
    config = HookchatConfig.model_validate(
        {"data": {"dir": str(tmp_path)}, "plugins": {"dirs": []}, "adapters": {"console": False}}
    )
    console = ConsoleAdapter(out=out or Out(), interactive=interactive)
    kwargs = {} if builtins is None else {"builtins": builtins}
    app = HookChat(config, provider=provider, adapters=[console], plugins=list(plugins), entry_points=False, **kwargs)
    return app, console


async def test_a_line_gets_the_bots_reply(tmp_path):
    app, console = bot(tmp_path, ScriptedProvider(["Hello there"]))
    async with app:
        await console.repl(io.StringIO("hi\n"))
    assert "you> bot> Hello there\n" in console.out.getvalue()


async def test_help_lists_the_console_keys_and_the_commands_without_asking_the_model(tmp_path):
    provider = ScriptedProvider([])
    app, console = bot(tmp_path, provider)
    async with app:
        await console.repl(io.StringIO("/help\n/quit\nnever read\n"))
    shown = console.out.getvalue()
    assert CONSOLE_HELP in shown
    assert "bot> Commands: /help: list these commands; /reset: forget this conversation" in shown
    assert provider.requests == []


async def test_reset_forgets_the_conversation(tmp_path):
    provider = ScriptedProvider(["first answer", "fresh answer"])
    app, console = bot(tmp_path, provider)
    async with app:
        await console.say("remember me")
        assert len(await app.history.get_history(console.session.sid)) == 2
        await console.say("/reset")
        assert await app.history.get_history(console.session.sid) == []
        await console.say("again")
    assert "bot> Forgot this conversation (1 stored turn).\n" in console.out.getvalue()
    assert provider.requests[1].messages == [], "the model no longer sees the old turn"


class Gate(BasePlugin):
    @on.im_message(priority=200)
    async def closed(self, event, *args, **kwargs):
        if "secret" in event.message_repr:
            event.stop()


async def test_when_nothing_is_sent_the_console_says_which_plugin_stopped_it_or_that_none_answered(tmp_path):
    app, console = bot(tmp_path, ScriptedProvider([]), plugins=[Gate])
    async with app:
        await console.say("a secret")
    assert "(no reply: plugin hook gate.closed stopped the message)\n" in console.out.getvalue()
    app, console = bot(tmp_path / "bare", ScriptedProvider([]), builtins=())
    async with app:
        await console.say("anyone?")
    assert "(no reply: no plugin chose to answer the message (it was discarded))\n" in console.out.getvalue()


async def test_in_a_terminal_the_answer_streams_after_a_typing_indicator(tmp_path):
    out = Out()
    app, console = bot(
        tmp_path, ScriptedProvider(["<msg>Hello &amp; welcome</msg>"], chunk_size=3), out=out, interactive=True
    )
    async with app:
        await console.say("hi")
    shown = out.getvalue()
    assert shown.startswith("bot is typing...\r\033[Kbot> ")
    assert shown.count("Hello & welcome") == 1, "the streamed message is not printed a second time"
    assert shown.endswith("Hello & welcome\n")


class SlowModel(ScriptedProvider):
    """Answers the first request only when released (never, here), then like a scripted model."""

    def __init__(self) -> None:
        super().__init__(["second answer"])
        self.started = asyncio.Event()
        self.cancelled = False

    async def complete(self, req: LLMRequest) -> LLMResponse:
        if not self.started.is_set():
            self.started.set()
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                self.cancelled = True
                raise
        return await super().complete(req)


async def test_ctrl_c_during_an_answer_stops_that_answer_only(tmp_path):
    provider = SlowModel()
    app, console = bot(tmp_path, provider)
    async with app:
        saying = asyncio.create_task(console.say("take your time"))
        await provider.started.wait()
        console._interrupt()  # what Ctrl-C does during an answer
        await saying
        await console.say("and now?")
    shown = console.out.getvalue()
    assert "(answer stopped)\n" in shown and "bot> second answer\n" in shown
    assert provider.cancelled, "the model call itself was cancelled"
    assert "error" not in shown.lower()


async def test_a_character_the_terminal_cannot_show_does_not_end_the_chat(tmp_path):
    out = Out("ascii")
    app, console = bot(tmp_path, ScriptedProvider(["caf\u00e9 \ud83d"]), out=out)
    async with app:
        await console.say("hi")
    assert "bot> caf? ?\n" in out.getvalue()


async def test_ctrl_c_at_the_prompt_leaves_at_once_while_the_input_still_blocks(tmp_path):
    read_end, write_end = os.pipe()  # an input that never gets a line, as a terminal waiting for the user
    app, console = bot(tmp_path, ScriptedProvider([]))
    with os.fdopen(read_end) as stdin, os.fdopen(write_end, "w"):
        async with app:
            repl = asyncio.create_task(console.repl(stdin))
            while "you> " not in console.out.getvalue():
                await asyncio.sleep(0)
            console._interrupt()  # what Ctrl-C does at the prompt
            with anyio.fail_after(10):
                await repl
    assert repl.done() and repl.exception() is None


async def test_a_log_line_during_a_streamed_answer_gets_a_line_of_its_own():
    import io
    import logging

    from core.adapter.console import ConsoleAdapter
    from core.chat import MessageChain
    from core.chat.message_elements import Text

    out = io.StringIO()
    console = ConsoleAdapter(out=out, interactive=True)
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with console.logs_off_the_line():
            await console.draft(console.session, "Hel")
            logging.getLogger("hookchat").warning("event loop blocked for 0.3 s")
            await console.draft(console.session, "Hello")
            await console.send(console.session, MessageChain([Text("Hello")]))
    finally:
        root.removeHandler(handler)
    assert out.getvalue() == "bot> Hel\r\033[KWARNING event loop blocked for 0.3 s\nbot> Hello\n"
