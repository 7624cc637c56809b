"""The heap of a started bot, kept out of the garbage collector's walks.

By the time a bot has started, its process holds hundreds of thousands of objects that live until it exits (the
imported libraries, the plugins, the config). Every full collection, which the turns' own allocations trigger,
walks all of them: in `bench/adapters.py`'s process (aiogram, matrix-nio and discord.py imported) a quarter of a
second each. `freeze_started()` moves them to the collector's permanent generation once the bot is up, so those
collections walk only what the turns made (docs/performance.md). Frozen objects are never collected, so
`thaw()` hands them back when a plugin stops (an unloaded or reloaded plugin's old module must be collectable);
the heap then stays unfrozen until the next start.
"""

from __future__ import annotations

import gc

__all__ = ["freeze_started", "thaw"]


def freeze_started() -> None:
    """Called once a long-running command's bot has started: collect what start-up left behind, then freeze the
    rest."""
    gc.collect()
    gc.freeze()


def thaw() -> None:
    """Called when a plugin stops: the frozen objects (its module's among them) can be collected again."""
    if gc.get_freeze_count():
        gc.unfreeze()
