"""The framework's own behaviour, written as ordinary plugin folders and shipped as package data: `chat` (the
debounce), `builtin_tags` (the output tags), `commands` (the console's `/help`, `/reset`, ...), and `examples/`
(not loaded by default). The loader finds them with `importlib.resources`, never through a path into a source
tree, so an installed hookchat has them wherever it runs. No module of `core` imports them; a folder of the same
plugin id in a configured plugin directory replaces the built-in one."""

from __future__ import annotations

from importlib.resources import as_file, files
from pathlib import Path

__all__ = ["BUILTIN_PLUGINS", "builtin_plugins_dir"]

#: The built-in plugins every app loads unless the operator disables them (`[plugins] disabled`).
BUILTIN_PLUGINS = ("builtin_tags", "chat", "commands")


def builtin_plugins_dir() -> Path:
    """The folder holding the built-in plugin folders, inside the installed package."""
    with as_file(files(__name__)) as folder:  # a real folder: wheels install unzipped
        return Path(folder)
