"""Where the running bot keeps its data: `get_data_path()` (KiraAI's `core.utils.path_utils` path).

The application sets it from `[data] dir` when it starts, before any plugin is imported, so a plugin that reads it
at import time gets the right directory. Without a running application it is `<working directory>/data`, which is
also hookchat's default `[data] dir`.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["get_data_path", "set_data_path"]

_data_path: Path | None = None


def get_data_path() -> Path:
    """The data directory of the running bot (absolute); `<cwd>/data` when none has been set."""
    return _data_path if _data_path is not None else Path.cwd().resolve() / "data"


def set_data_path(path: Path | str | None) -> None:
    """Set the directory `get_data_path()` returns (None: back to the default). The application calls this."""
    global _data_path
    _data_path = Path(path).resolve() if path is not None else None
