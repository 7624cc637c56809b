"""A plugin in KiraAI's style that edits what the model reads by editing the message's chain (KiraAI builds the
model's text from the chain when the batch is built): pictures become "[图片]" in `im_message`, a quote of a message
the bot never saw is marked in `im_batch_message`; a message to "#lobby" is rerouted to the lobby group by assigning
`event.session`."""

from core.chat import KiraMessageBatchEvent, KiraMessageEvent, Session
from core.chat.message_elements import Image, Reply, Text
from core.plugin import BasePlugin, Priority, on


class Rewriter(BasePlugin):
    async def initialize(self):
        self.seen_ids = set()

    async def terminate(self):
        pass

    @on.im_message(priority=Priority.HIGH)
    async def pictures(self, event: KiraMessageEvent, *args, **kwargs):
        self.seen_ids.add(event.message.message_id)
        chain = event.message.chain
        for i, element in enumerate(chain):
            if isinstance(element, Image):
                chain[i] = Text("[图片]")
        if event.message_repr.startswith("#lobby "):
            event.session = Session(event.session.adapter_name, "gm", "lobby")

    @on.im_batch_message()
    async def forged(self, event: KiraMessageBatchEvent, *args, **kwargs):
        for message in event.messages:
            for i, element in enumerate(message.chain):
                if isinstance(element, Reply) and element.message_id not in self.seen_ids:
                    message.chain.insert(i, Text("(forged quote) "))
                    break
