"""The console adapter: a terminal chat with the bot through the whole pipeline (`hookchat chat`).

Enter ends a message and flushes the session's buffer at once (nobody wants to wait for a debounce in a terminal).
In a terminal the answer streams as the model writes it, after a typing indicator; Ctrl-C during an answer stops
that answer only, Ctrl-C at the prompt, Ctrl-D, `/quit` and `/exit` leave. When nothing is sent, the console says
why: which plugin stopped the message, or that no plugin chose to answer it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TextIO

from core.adapter import Adapter
from core.chat import (
    KiraIMMessage,
    KiraIMSentResult,
    MessageChain,
    MessageStrategy,
    Session,
    TurnResult,
    User,
)
from core.chat.message_elements import Text

__all__ = ["ConsoleAdapter", "CONSOLE_HELP"]

#: What the console itself understands; `/help` shows it above the commands plugins answer.
CONSOLE_HELP = "Console: Enter sends; Ctrl-C stops an answer; Ctrl-C at the prompt, Ctrl-D or /quit leaves."
_QUIT = ("/quit", "/exit")
_TYPING = "bot is typing..."


class ConsoleAdapter(Adapter):
    """Reads lines from `stdin` as messages of one direct chat (`console:dm:<user>`) and prints the bot's messages
    to `out`. `interactive` (default: whether `out` is a terminal) turns on streaming and the typing indicator."""

    name = "console"
    capabilities = frozenset({"text", "image", "file", "record", "emoji", "at", "reply"})

    def __init__(
        self,
        name: str | None = None,
        *,
        user_id: str = "you",
        out: TextIO | None = None,
        prompt: str = "you> ",
        interactive: bool | None = None,
    ) -> None:
        super().__init__(name)
        self.session = Session(self.name, "dm", user_id)
        self.user = User(user_id, user_id)
        self.out = out or sys.stdout
        self.prompt = prompt
        self.interactive = self.out.isatty() if interactive is None else interactive
        self.drafts = self.interactive
        self._count = 0
        self._line = ""  # what the current draft line shows after "bot> " (interactive only)
        self._redraw = False  # a log line took the draft's place: show the whole draft again
        self._typing = False
        self._turn: asyncio.Future[TurnResult] | None = None
        self._leaving = False

    # -- output ----------------------------------------------------------------------------------------------------

    def _write(self, text: str) -> None:
        """Write to the terminal; a character its encoding cannot show becomes `?` instead of ending the chat."""
        encoding = getattr(self.out, "encoding", None) or "utf-8"
        self.out.write(text.encode(encoding, "replace").decode(encoding, "replace"))
        self.out.flush()

    def _make_room(self, record: logging.LogRecord) -> bool:
        """A logging filter: before a log line is printed, clear the line being written (the draft, or the typing
        indicator), so the log line stands on a line of its own; the draft is shown again whole after it."""
        if (self._line and not self._redraw) or self._typing:  # once per record, however many handlers
            self._write("\r\033[K")
            self._typing = False
            self._redraw = bool(self._line)
        return True

    @contextlib.contextmanager
    def logs_off_the_line(self) -> Iterator[None]:
        """While the block runs (the chat), log lines printed by the root logger's handlers never land in the
        middle of an answer being written (an "event loop blocked" warning during a streamed answer)."""
        handlers = list(logging.getLogger().handlers) if self.interactive else []
        for handler in handlers:
            handler.addFilter(self._make_room)
        try:
            yield
        finally:
            for handler in handlers:
                handler.removeFilter(self._make_room)

    def _clear_status(self) -> None:
        if self._typing:
            self._write("\r\033[K")
            self._typing = False

    async def draft(self, session: Session, text: str) -> None:
        """Show the message the model is writing, as it grows (only the new characters are written)."""
        self._clear_status()
        if self._redraw and text.startswith(self._line):
            self._redraw = False
            self._write(f"bot> {text}")
            self._line = text
            return
        if not text.startswith(self._line):
            self._write("\n")
            self._line = ""
        if not self._line:
            self._write("bot> ")
        self._write(text[len(self._line) :])
        self._line = text

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        """Print one message; a message already shown as it streamed only ends its line."""
        self._count += 1
        self._clear_status()
        text = chain.message_repr
        if self._line and text == self._line and not self._redraw:
            self._write("\n")
        else:
            if self._line and not self._redraw:
                self._write("\n")
            self._write(f"bot> {text}\n")
        self._line, self._redraw = "", False
        return KiraIMSentResult(chain, session, ok=True, message_id=f"console-{self._count}")

    # -- input -----------------------------------------------------------------------------------------------------

    async def say(self, text: str) -> None:
        """Deliver one line as the user's message and wait for the turn it causes, saying why when nothing came."""
        assert self.app is not None, "the adapter is not started"
        sent_before = self._count
        message = KiraIMMessage(MessageChain([Text(text)]), self.user, self.session, is_mentioned=True)
        received = await self.app.receive(message)
        turn = received.turn
        if turn is None and received.strategy is MessageStrategy.BUFFER:
            turn = self.app.flush(self.session)
        if turn is not None:
            if self.interactive:
                self._write(_TYPING)
                self._typing = True
            self._turn = turn
            try:
                await asyncio.wait([turn])
            finally:
                self._turn = None
                self._clear_status()
            if turn.cancelled():
                self._write(("\n" if self._line else "") + "(answer stopped)\n")
                self._line = ""
                return
        if self._count > sent_before:
            return
        self._write(f"({self._why_nothing(received.event.stopped_by, received.strategy, turn)})\n")

    @staticmethod
    def _why_nothing(stopped_by: str | None, strategy: MessageStrategy | None, turn: asyncio.Future | None) -> str:
        if strategy is None:
            return f"no reply: plugin hook {stopped_by or '?'} stopped the message"
        if strategy is MessageStrategy.DISCARD:
            return "no reply: no plugin chose to answer the message (it was discarded)"
        result = turn.result() if turn is not None and not turn.cancelled() and turn.exception() is None else None
        if result is not None and result.stopped:
            return f"no reply: plugin hook {result.batch.stopped_by or '?'} stopped the turn"
        return "no reply: the model returned nothing to send"

    def _interrupt(self) -> None:
        """Ctrl-C: stop the answer being written, or leave when at the prompt."""
        if self._turn is not None and not self._turn.done():
            if self.app is None or not self.app.cancel_turn(self.session):
                self._turn.cancel()  # queued, not started: take it back
            return
        self._leaving = True
        self._lines.put_nowait(None)

    async def repl(self, stdin: TextIO | None = None) -> None:
        """Read lines until end of input, `/quit`, `/exit` or Ctrl-C at the prompt."""
        stdin = stdin or sys.stdin
        assert stdin is not None, "repl() needs a stdin: the process has none"
        loop = asyncio.get_running_loop()
        self._start_reader(stdin)
        handled = False
        try:
            loop.add_signal_handler(signal.SIGINT, self._interrupt)
            handled = True
        except (NotImplementedError, RuntimeError, ValueError):  # not the main thread, or no signals here
            pass
        try:
            with self.logs_off_the_line():
                await self._read_lines()
        finally:
            if handled:
                loop.remove_signal_handler(signal.SIGINT)

    async def _read_lines(self) -> None:
        while not self._leaving:
            self._write(self.prompt)
            line = await self._lines.get()
            if not line:
                self._write("\n")
                return
            text = line.strip()
            if text in _QUIT:
                return
            if text == "/help":
                self._write(CONSOLE_HELP + "\n")
            if text:
                await self.say(text)

    def _start_reader(self, stdin: TextIO) -> None:
        """Read `stdin` in a daemon thread of its own, line by line, into `self._lines` (an empty line at the end).
        A daemon thread, not a worker of the loop's pool: a read still blocked when the chat ends must not keep the
        process alive."""
        loop = asyncio.get_running_loop()
        lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._lines = lines

        def read() -> None:
            while True:
                line = stdin.readline()
                try:
                    loop.call_soon_threadsafe(lines.put_nowait, line)
                except RuntimeError:  # the loop is closed: nobody is listening any more
                    return
                if not line:
                    return

        threading.Thread(target=read, name="hookchat-console-input", daemon=True).start()
