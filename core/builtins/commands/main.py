"""The user's chat commands, an ordinary plugin: `/help` lists them and `/reset` forgets the conversation (history
and the messages waiting for an answer, which leave the inbox). A command is answered and stopped before any other hook sees it; a message that only looks
like one (`/unknown`) goes on as chat."""

from __future__ import annotations

from core.chat import KiraMessageEvent, MessageChain
from core.chat.message_elements import Text
from core.plugin import BasePlugin, on

#: Runs before the chat plugin's SYS_HIGH hook: a command never reaches the model.
COMMANDS_PRIORITY = 110


class CommandsPlugin(BasePlugin):
    """`/help` and `/reset`, with the prefix and group policy of its config."""

    COMMANDS = {
        "help": "list these commands",
        "reset": "forget this conversation (its history and the messages waiting for an answer)",
    }

    @on.im_message(priority=COMMANDS_PRIORITY)
    async def command(self, event: KiraMessageEvent, *args, **kwargs):
        """Answer a known command and stop the message."""
        text = event.message_repr.strip()
        prefix = self.cfg["prefix"]
        name = text[len(prefix) :].split(maxsplit=1)[0].lower() if text.startswith(prefix) and text != prefix else ""
        if name not in self.COMMANDS or (event.group is not None and not self.cfg["in_groups"]):
            return
        app = self.ctx.app
        if app is None:
            return
        event.stop()
        if name == "reset":
            deleted = await app.reset(event.session)
            reply = f"Forgot this conversation ({deleted} stored turn{'s' if deleted != 1 else ''})."
        else:
            reply = "Commands: " + "; ".join(f"{prefix}{n}: {what}" for n, what in self.COMMANDS.items())
        await app.send(event.session, MessageChain([Text(reply)]), event)
