"""The built-in chat behaviour: buffer incoming messages per session and flush them to the model after
`flush_messages` messages or `quiet_seconds` of quiet; in groups, only when mentioned or woken by a wake word.
Its timers follow the app's clock (`app.clock`), so tests move time by hand with the testing kit's `ManualClock`."""

from __future__ import annotations

from core.chat import KiraMessageEvent
from core.plugin import BasePlugin, Priority, on
from core.utils.clock import Clock, LoopClock, TimerHandle


class ChatPlugin(BasePlugin):
    """Sets the `buffer` strategy first (SYS_HIGH), so any later hook may still choose another one."""

    async def initialize(self) -> None:
        """Start with no timers, and the task that evicts idle buffers."""
        self._timers: dict[str, TimerHandle] = {}
        self._wake_words = [w.lower() for w in self.cfg["wake_words"] if w]
        self.ctx.spawn(self._evict_idle_buffers(), name="evict-idle-buffers")

    async def terminate(self) -> None:
        """Cancel every pending flush timer: they belong to this plugin."""
        for handle in self._timers.values():
            handle.cancel()
        self._timers.clear()

    @property
    def _clock(self) -> Clock:
        app = self.ctx.app
        return app.clock if app is not None else LoopClock()

    def wants(self, event: KiraMessageEvent) -> bool:
        """Whether the bot should answer this message at all."""
        if event.is_notice:  # a poke at the bot is answered; a recall or someone joining is not a question
            return event.is_mentioned
        if event.group is None:
            return True
        if not self.cfg["answer_in_groups"]:
            return False
        text = event.message_repr.lower()
        return event.is_mentioned or any(word in text for word in self._wake_words)

    @on.im_message(priority=Priority.SYS_HIGH)
    async def choose_strategy(self, event: KiraMessageEvent, *args, **kwargs):
        """Buffer a message the bot should answer; flush when the buffer reaches `flush_messages`."""
        if not self.wants(event):
            return
        app = self.ctx.app
        buffered = app.buffers.size(event.sid) if app is not None else 0
        if buffered + 1 >= self.cfg["flush_messages"]:
            # The quiet timer stays: a later hook may still discard this message, and a timer that fires on an
            # empty buffer does nothing.
            event.flush()
        else:
            event.buffer()

    @on.message_buffered(priority=Priority.SYS_LOW)
    async def restart_quiet_timer(self, event: KiraMessageEvent, *args, **kwargs):
        """Flush the session after `quiet_seconds` without a new message (sliding)."""
        self._cancel_timer(event.sid)
        self._timers[event.sid] = self._clock.call_later(self.cfg["quiet_seconds"], self._flush, event.sid)

    def _cancel_timer(self, sid: str) -> None:
        handle = self._timers.pop(sid, None)
        if handle is not None:
            handle.cancel()

    def _flush(self, sid: str) -> None:
        self._timers.pop(sid, None)
        if self.ctx.app is not None:
            self.ctx.app.flush(sid)

    async def _evict_idle_buffers(self) -> None:
        idle = float(self.cfg["idle_evict_seconds"])
        while True:
            await self._clock.sleep(idle / 2)
            if self.ctx.app is not None:
                self.ctx.app.buffers.evict_idle(idle)
