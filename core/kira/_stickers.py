"""KiraAI's sticker library over a folder: `<data>/sticker/` (KiraAI's place), the pictures in it and an index
`stickers.json` (`{"<id>": {"desc": ..., "path": <file name>}}`) of their ids and descriptions. The index is read
off the event loop when the application starts and kept in memory, so the `<sticker>` tag never touches the disk
on the loop; a file the index does not name is a sticker too, its id and description its file name's stem.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio

from core.plugin import NotSupportedHere

__all__ = ["StickerManager", "STICKER_EXTENSIONS"]

logger = logging.getLogger("hookchat.kira.sticker")

#: The picture files KiraAI's sticker plugin takes as stickers.
STICKER_EXTENSIONS = (".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp")
INDEX = "stickers.json"


def _read(folder: Path) -> dict[str, dict[str, Any]]:
    folder.mkdir(parents=True, exist_ok=True)
    stickers: dict[str, dict[str, Any]] = {}
    index = folder / INDEX
    if index.is_file():
        try:
            raw = json.loads(index.read_text("utf-8"))
        except ValueError as exc:
            logger.error(
                "sticker index %s is not valid JSON (%s): its stickers are not offered; fix the file", index, exc
            )
            raw = {}
        for sid, entry in raw.items() if isinstance(raw, dict) else ():
            if isinstance(entry, dict) and isinstance(entry.get("path"), str):
                stickers[str(sid)] = {
                    "desc": str(entry.get("desc") or ""),
                    "path": entry["path"],
                    "extra": dict(entry.get("extra") or {}),
                }
    named = {entry["path"] for entry in stickers.values()}
    for file in sorted(folder.iterdir()):
        if file.suffix.lower() in STICKER_EXTENSIONS and file.name not in named and file.stem not in stickers:
            stickers[file.stem] = {"desc": file.stem, "path": file.name, "extra": {}}
    return stickers


class StickerManager:
    """KiraAI's `StickerManager` as its plugins use it: `sticker_folder`, `sticker_dict` (id -> `desc`, `path`,
    `extra`), `sticker_paths`, `register_sticker`, `update_sticker_desc`, `delete_sticker`,
    `on_sticker_registered` / `off_sticker_registered`, `get_sticker_extra` / `set_sticker_extra`, and `path_of(id)`
    (the picture's file, inside the folder, or None)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._stickers: dict[str, dict[str, Any]] = {}
        self._callbacks: list[Callable[..., Any]] = []

    @property
    def sticker_folder(self) -> str:
        """The folder of the sticker pictures."""
        return str(self.folder)

    @property
    def sticker_dict(self) -> dict[str, dict[str, Any]]:
        """Every sticker by id: `{"desc": ..., "path": <file name in the folder>, "extra": {...}}`."""
        return self._stickers

    @property
    def sticker_paths(self) -> list[str]:
        """The file names of every sticker."""
        return [entry["path"] for entry in self._stickers.values()]

    async def init(self) -> None:
        """Read the folder and its index (in a worker thread)."""
        self._stickers = await anyio.to_thread.run_sync(_read, self.folder)

    def path_of(self, sticker_id: str) -> Path | None:
        """The picture of sticker `sticker_id`, or None for an unknown id or a path that leaves the folder."""
        entry = self._stickers.get(str(sticker_id))
        if entry is None:
            return None
        root = self.folder.resolve()
        path = (root / entry["path"]).resolve()
        return path if path.is_relative_to(root) else None

    def on_sticker_registered(self, callback: Callable[..., Any]) -> None:
        """Call `callback(sticker_id, {"desc", "path"})` (sync or async) after each `register_sticker`."""
        self._callbacks.append(callback)

    def off_sticker_registered(self, callback: Callable[..., Any]) -> None:
        """Stop calling `callback`."""
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    async def _save(self) -> None:
        text = json.dumps(
            {sid: {"desc": e["desc"], "path": e["path"], "extra": e["extra"]} for sid, e in self._stickers.items()},
            ensure_ascii=False,
            indent=2,
        )
        await anyio.to_thread.run_sync((self.folder / INDEX).write_text, text, "utf-8")

    async def register_sticker(self, filename: str, desc: str, sticker_id: str | None = None) -> None:
        """Add the picture `filename` (in the folder) under `sticker_id` (default: the next number)."""
        if sticker_id is None:
            numbers = [int(s) for s in self._stickers if s.isdigit()]
            sticker_id = str(max(numbers, default=0) + 1)
        self._stickers[str(sticker_id)] = {"desc": desc, "path": filename, "extra": {}}
        await self._save()
        for callback in list(self._callbacks):
            try:
                outcome = callback(str(sticker_id), {"desc": desc, "path": filename})
                if inspect.isawaitable(outcome):
                    await outcome
            except Exception:  # one plugin's callback must not stop the others
                logger.exception("sticker registered callback %r failed", callback)

    async def update_sticker_desc(self, sticker_id: str, desc: str) -> dict[str, str]:
        """Change a sticker's description; `KeyError` for an unknown id."""
        entry = self._stickers[str(sticker_id)]
        entry["desc"] = desc
        await self._save()
        return {"id": str(sticker_id), "desc": desc, "path": entry["path"]}

    async def delete_sticker(self, sticker_id: str, delete_file: bool = False) -> None:
        """Remove a sticker from the index (and its file with `delete_file`); `KeyError` for an unknown id."""
        path = self.path_of(sticker_id)
        del self._stickers[str(sticker_id)]
        await self._save()
        if delete_file and path is not None:
            await anyio.to_thread.run_sync(lambda: path.unlink(missing_ok=True))

    async def add_sticker(self, *args: Any, **kwargs: Any) -> Any:
        """Refused: KiraAI's web upload; copy the picture into the sticker folder (or `register_sticker` it)."""
        raise NotSupportedHere(
            "sticker_manager.add_sticker", "copy the picture into the sticker folder, then register_sticker it"
        )

    def get_sticker_extra(self, sticker_id: str, key: str | int | None = None) -> Any:
        """A sticker's extra data (one key of it with `key`)."""
        extra = self._stickers[str(sticker_id)]["extra"]
        return extra if key is None else extra.get(str(key))

    def set_sticker_extra(self, sticker_id: str, key: str | int, value: Any) -> None:
        """Set one key of a sticker's extra data (in memory until the next save)."""
        self._stickers[str(sticker_id)]["extra"][str(key)] = value
