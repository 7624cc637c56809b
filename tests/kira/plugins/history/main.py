"""A plugin in KiraAI's style over the session manager, whose methods are plain calls in KiraAI: it keeps each
session's history to its newest turns, condenses it on `/condense`, deletes it on `/forget`, and counts turns from
a thread of its own."""

import threading

from core.plugin import BasePlugin, Priority, on

KEEP = 2


class HistoryKeeper(BasePlugin):
    async def initialize(self):
        self.counts_from_thread = []

    async def terminate(self):
        pass

    @on.im_message(priority=Priority.HIGH)
    async def commands(self, event, *args, **kwargs):
        sid = event.session.sid
        text = event.message_repr.strip()
        if text == "/forget":
            self.ctx.session_mgr.delete_session(sid)
            event.stop()
        elif text == "/condense":
            memory = self.ctx.session_mgr.read_memory(sid)
            said = " / ".join(m["content"] for chunk in memory for m in chunk if m["role"] == "user")
            self.ctx.session_mgr.write_memory(sid, [])
            self.ctx.session_mgr.update_memory(
                sid,
                [
                    {"role": "user", "content": "(summary of earlier chat)"},
                    {"role": "assistant", "content": f"the user said: {said}"},
                ],
            )
            event.stop()
        elif text == "/count":
            thread = threading.Thread(
                target=lambda: self.counts_from_thread.append(self.ctx.session_mgr.get_memory_count(sid))
            )
            thread.start()
            thread.join()
            event.stop()

    @on.final_result()
    async def trim(self, event, *args, **kwargs):
        sid = event.session.sid
        if self.ctx.session_mgr.get_memory_count(sid) > KEEP:
            memory = self.ctx.session_mgr.read_memory(sid)
            self.ctx.session_mgr.write_memory(sid, memory[-KEEP:])
