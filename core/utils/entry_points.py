"""The installed packages' entry points, read once for every group while nothing is installed or removed.

`importlib.metadata.entry_points(group=...)` reads every installed distribution's `entry_points.txt` at each call
(a few milliseconds with a hundred packages), and starting a bot asks for several groups (the provider types, the
plugins). The scan is kept and reused until `sys.path` or one of its folders changes (installing or removing a
package changes its site-packages folder), so a package installed while the process runs is still found.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.metadata import EntryPoints

__all__ = ["entry_points"]

#: The `sys.path` state of the last scan and what it found: all groups, as `importlib.metadata.entry_points()`
#: returns them (`SelectableGroups` on Python 3.11, `EntryPoints` from 3.12; both `select(group=...)`).
_scan: tuple[tuple[tuple[str, int], ...], Any] | None = None


def _path_state() -> tuple[tuple[str, int], ...]:
    """Each `sys.path` entry with its modification time (-1 when it cannot be read)."""
    state = []
    for entry in sys.path:
        try:
            mtime = os.stat(entry or ".").st_mtime_ns
        except (OSError, TypeError, ValueError):
            mtime = -1
        state.append((str(entry), mtime))
    return tuple(state)


def entry_points(group: str) -> EntryPoints:
    """The installed entry points of `group`, as `importlib.metadata.entry_points(group=group)` returns them."""
    global _scan
    import importlib.metadata  # email, zipfile and csv: only for a command that looks for entry points

    state = _path_state()
    if _scan is None or _scan[0] != state:
        _scan = (state, importlib.metadata.entry_points())
    found: EntryPoints = _scan[1].select(group=group)
    return found
