"""What a Matrix adapter keeps in the data directory between runs (`<data>/adapters/matrix/<name>/state.json`):
the sync token of the last delivered batch, the events delivered since, the device, and each person's direct chat.
Read and written in a worker thread, atomically (a crash leaves the old file or the new one, never half of one)."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path

import anyio

__all__ = ["MatrixState", "load_state", "save_state"]

logger = logging.getLogger("hookchat.adapter.matrix")


@dataclass
class MatrixState:
    """The adapter's memory across restarts. `next_batch` is where the next sync starts (None: never synced, so
    the first sync only learns where "now" is and answers nothing old); `delivered` holds the ids of events delivered
    after that token was written, so a stop in the middle of a batch does not deliver them twice."""

    homeserver: str = ""
    user_id: str = ""
    device_id: str | None = None
    next_batch: str | None = None
    delivered: list[str] = field(default_factory=list)
    direct: dict[str, str] = field(default_factory=dict)  # user id -> room id of the direct chat with them


def _read(path: Path, homeserver: str, user_id: str) -> MatrixState:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        state = MatrixState(**{k: v for k, v in data.items() if k in MatrixState.__dataclass_fields__})
    except FileNotFoundError:
        return MatrixState(homeserver, user_id)
    except (OSError, ValueError, TypeError) as exc:
        logger.warning(
            "matrix: cannot read %s (%s); starting without it: old messages are not answered, but the "
            "next sync starts from now",
            path,
            exc,
        )
        return MatrixState(homeserver, user_id)
    if (state.homeserver, state.user_id) != (homeserver, user_id):
        logger.info(
            "matrix: %s belongs to %s on %s; starting afresh for %s on %s",
            path,
            state.user_id,
            state.homeserver,
            user_id,
            homeserver,
        )
        return MatrixState(homeserver, user_id)
    return state


def _write(path: Path, state: MatrixState) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".part")
    with open(partial, "w", encoding="utf-8") as out:
        json.dump(asdict(state), out)
    partial.replace(path)  # no fsync: a token lost with the machine's power means one batch answered again


async def load_state(path: Path, homeserver: str, user_id: str) -> MatrixState:
    """The state in `path` if it is this account's, else a fresh one."""
    return await anyio.to_thread.run_sync(_read, path, homeserver, user_id)


async def save_state(path: Path, state: MatrixState) -> None:
    """Write `state` to `path` atomically (a copy is written, so the caller may go on changing it)."""
    snapshot = MatrixState(**asdict(state))  # asdict copies the list and the dict
    await anyio.to_thread.run_sync(_write, path, snapshot)
