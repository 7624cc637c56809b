"""The code of seeds 000 and 002, verbatim, for the SDK tests: whole code blocks, and the snippets written against
`self` placed unmodified into methods of a generated plugin."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from tests.seeds.extract import code_blocks

HERE = Path(__file__).parent
SEED_000 = HERE / "seed_000.txt"
SEED_002 = HERE / "seed_002.txt"


def block(seed: Path, contains: str) -> str:
    """The seed's code block containing `contains`."""
    return next(b for b in code_blocks(seed) if contains in b)


def snippet(first: str, last: str, seed: Path = SEED_002, *, occurrence: int = 0) -> str:
    """The seed's lines from a line starting with `first` (the first such line, or a later `occurrence`) through
    the next one starting with `last`."""
    lines = seed.read_text(encoding="utf-8").splitlines()
    start = [i for i, line in enumerate(lines) if line.startswith(first)][occurrence]
    end = next(i for i in range(start, len(lines)) if lines[i].startswith(last))
    return "\n".join(lines[start : end + 1])


def method(name: str, *parts: str, returns: str = "locals()") -> str:
    """An `async def name(self, **_)` whose body is `parts` (code lines), then `return <returns>`."""
    body = "\n".join(parts) + f"\nreturn {returns}\n"
    return f"async def {name}(self, **_):\n{textwrap.indent(body, '    ')}"


def write_plugin(
    root: Path, plugin_id: str, class_name: str, members: list[str], *, files: dict[str, str] = (), header: str = ""
) -> Path:
    """A plugin folder whose `main.py` defines `class_name(NekoPluginBase)` with `members` (methods as source)."""
    folder = root / plugin_id
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(
        json.dumps({"plugin_id": plugin_id, "version": "1.2.3", "display_name": class_name})
    )
    body = "\n".join(textwrap.indent(m, "    ") for m in members) or "    pass"
    source = f"from plugin.sdk.plugin import *\n{header}\n\n@neko_plugin\nclass {class_name}(NekoPluginBase):\n{body}\n"
    (folder / "main.py").write_text(source)
    for name, text in dict(files).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return folder
