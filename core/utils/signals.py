"""blinker signals for observers that need no ordering: plugin lifecycle and hook failures.

Connect with `plugin_loaded.connect(receiver)`; receivers are called synchronously with the sender (the plugin
manager or the hook engine) and keyword arguments. A receiver that raises is logged and ignored. blinker holds
receivers weakly by default: keep a reference to a bound method or lambda you connect, or pass `weak=False`.
"""

from __future__ import annotations

import blinker

from core.utils.log import logger

__all__ = [
    "plugin_loaded",
    "plugin_unloaded",
    "plugin_failed",
    "hook_failed",
    "hook_stuck",
    "loop_stalled",
    "message_sent",
    "send",
]

_ns = blinker.Namespace()

#: A plugin finished loading and initialising. kwargs: plugin_id.
plugin_loaded = _ns.signal("plugin-loaded")
#: A plugin was disabled or unloaded and everything it registered is gone. kwargs: plugin_id.
plugin_unloaded = _ns.signal("plugin-unloaded")
#: A plugin could not be loaded. kwargs: plugin_id, reason.
plugin_failed = _ns.signal("plugin-failed")
#: A hook raised or passed its deadline. kwargs: plugin_id, hook_name, event_name, error, timed_out.
hook_failed = _ns.signal("hook-failed")
#: A hook ignored its cancellation and still runs a deadline later: its plugin is faulty, and the owner of the
#: task blocked in it abandons that task (the turn scheduler moves the session on). kwargs: plugin_id, hook_name,
#: event_name, task.
hook_stuck = _ns.signal("hook-stuck")
#: The event loop was blocked. kwargs: seconds, plugin_id, hook_name (None when no hook was running).
loop_stalled = _ns.signal("loop-stalled")
#: The bot sent a message. kwargs: session, chain, result.
message_sent = _ns.signal("message-sent")


def send(signal: blinker.NamedSignal, sender: object, **kwargs: object) -> None:
    """Send `signal`, logging (never raising) a receiver's failure."""
    if not signal.receivers:
        return
    for receiver in signal.receivers_for(sender):
        try:
            receiver(sender, **kwargs)
        except Exception:
            logger.exception("signal receiver %r for %s failed", receiver, signal.name)
