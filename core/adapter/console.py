"""The console adapter: a terminal chat with the bot through the whole pipeline (`hookchat chat`)."""

from __future__ import annotations

import sys
from typing import TextIO

import anyio

from core.adapter import Adapter
from core.chat.message_elements import Text
from core.chat.message_utils import KiraIMMessage, KiraIMSentResult, MessageChain
from core.chat.session import Session, User

__all__ = ["ConsoleAdapter"]


class ConsoleAdapter(Adapter):
    """Reads lines from stdin as messages of one direct chat (`console:dm:<user>`) and prints the bot's messages.

    Pressing Enter ends a message and, like the harness, flushes the session's buffer at once: in a terminal,
    nobody wants to wait for a debounce.
    """

    name = "console"
    capabilities = frozenset({"text", "image", "file", "record", "emoji", "at", "reply"})

    def __init__(self, name: str | None = None, *, user_id: str = "you", out: TextIO | None = None,
                 prompt: str = "you> ") -> None:
        super().__init__(name)
        self.session = Session(self.name, "dm", user_id)
        self.user = User(user_id, user_id)
        self.out = out or sys.stdout
        self.prompt = prompt
        self._count = 0

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        self._count += 1
        self.out.write(f"bot> {chain.message_repr}\n")
        self.out.flush()
        return KiraIMSentResult(chain, session, ok=True, message_id=f"console-{self._count}")

    async def say(self, text: str) -> None:
        """Deliver one line as the user's message and wait for the turn it causes."""
        assert self.app is not None, "the adapter is not started"
        message = KiraIMMessage(MessageChain([Text(text)]), self.user, self.session, is_mentioned=True)
        result = await self.app.respond(message)
        if result is None:
            self.out.write("(no reply: a plugin discarded the message)\n")
            return
        if not result.sent and not result.stopped:
            self.out.write("(the model returned nothing to send)\n")

    async def repl(self, stdin: TextIO | None = None) -> None:
        """Read lines until EOF, `/quit` or `/exit`."""
        stdin = stdin or sys.stdin
        while True:
            self.out.write(self.prompt)
            self.out.flush()
            line = await anyio.to_thread.run_sync(stdin.readline)
            if not line:
                self.out.write("\n")
                return
            text = line.strip()
            if text in ("/quit", "/exit"):
                return
            if text:
                await self.say(text)
