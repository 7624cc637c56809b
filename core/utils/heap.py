"""The heap of a started bot, kept out of the garbage collector's walks.

By the time a bot has started, its process holds hundreds of thousands of objects that live until it exits (the
imported libraries, the plugins, the config). Every full collection, which the turns' own allocations trigger,
walks all of them: in `bench/adapters.py`'s process (aiogram, matrix-nio and discord.py imported) a quarter of a
second each. `freeze_started()` moves them to the collector's permanent generation once the bot is up, so those
collections walk only what the turns made (docs/performance.md). Frozen objects are never collected, so
`thaw()` hands them back when a plugin stops (an unloaded or reloaded plugin's old module must be collectable);
the heap then stays unfrozen until the next start.

It also raises the youngest generation's threshold (`YOUNG_THRESHOLD` container objects allocated and not yet freed,
from Python's 700): a serving bot has hundreds of turns in flight, whose objects are alive at every young
collection, so at 700 each collection walks them again and promotes them, and the old generation fills with turns
that end a moment later, which makes the full collections frequent. The threshold is high enough that a busy bot's
turns (a traced one holds some 200 containers until it ends) mostly end between two young collections: the collector
then never touches their objects, whose memory it would read cold. That costs a longer pause per collection (some
70-80 ms of CPU at 3,000 turns a second with 1,000 turns in flight, against 25-30 ms at 10,000) for a third of the
collector's time in all. Counted with `gc.callbacks` over `bench/pipeline.py` (docs/performance.md).

Around all of it, `command_heap()` is the collector's part in one command of the `hookchat` process. While the
command starts the collector does not run at all: what start-up allocates lives until the exit, so a collection
then walks a growing heap and frees next to nothing (as the `gc` module's documentation advises for a process that
freezes its heap: disable early, freeze once set up). When the command is done the process ends: what it made is
frozen, so the interpreter's last collection at the exit does not walk it all to free memory the operating system
takes back anyway (together 7% of a `hookchat plugins`, docs/performance.md). Nothing is finalized then: the
`__del__` of an object in a reference cycle does not run, which CPython does not promise at the exit anyway.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

__all__ = ["YOUNG_THRESHOLD", "command_heap", "freeze_started", "thaw"]

#: The youngest generation's collection threshold once a bot serves (`gc.set_threshold`; the older two unchanged).
YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def command_heap() -> Iterator[None]:
    """One command of the process: no automatic collections until `freeze_started()` (a long-running command's bot
    is up); a one-shot command (`hookchat plugins`) is done before that. When the block ends, everything is frozen,
    uncollected, and the collector runs again if it ran before: for the process's end, not for a caller that goes
    on (frozen objects are never collected; `gc.unfreeze()` hands them back)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def freeze_started() -> None:
    """Called once a long-running command's bot has started: collect what start-up left behind, freeze the rest,
    raise the youngest generation's threshold to `YOUNG_THRESHOLD` (kept until the process exits) and let the
    collector run again (`command_heap()` stopped it during start-up)."""
    gc.collect()
    gc.freeze()
    young, older, oldest = gc.get_threshold()
    gc.set_threshold(max(young, YOUNG_THRESHOLD), older, oldest)
    gc.enable()


def thaw() -> None:
    """Called when a plugin stops: the frozen objects (its module's among them) can be collected again."""
    if gc.get_freeze_count():
        gc.unfreeze()
