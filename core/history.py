"""The conversation history store: completed turns per session in one SQLite file (WAL mode), owned by a single
worker thread so the event loop never waits on the database. Each `append_turn` is durable when it returns.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar

from core.provider.llm import ChatMessage
from core.utils.log import logger
from core.utils.sqlite import SqliteOpenError, SqliteWorker
from core.utils.text import valid_text

__all__ = [
    "HistoryStore",
    "SessionHistory",
    "Turn",
    "InboxEntry",
    "HistoryError",
    "TurnNotFoundError",
    "copy_messages",
    "estimate_tokens",
]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS turns (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    sid TEXT NOT NULL,
    created_at REAL NOT NULL,
    tokens INTEGER NOT NULL,
    messages TEXT NOT NULL,
    meta TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS turns_sid_id ON turns (sid, id);
"""
# The inbox holds every received message whose turn is not stored yet (a row is deleted when it is done), so what
# it holds after a crash is exactly what was received and not answered. `seq` is the arrival order (AUTOINCREMENT:
# never reused, so always increasing; the `id` the pipeline holds is a random handle). `attempts` counts the turns
# that started for the message; one that used them all is set aside (`set_aside_at`) as poison and kept.
# AUTOINCREMENT: a turn id is never reused after a delete, so a plugin holding an old id cannot edit a newer turn.
_INBOX = """
CREATE TABLE IF NOT EXISTS inbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    sid TEXT NOT NULL,
    received_at REAL NOT NULL,
    message TEXT NOT NULL,
    attempts INTEGER NOT NULL DEFAULT 0,
    set_aside_at REAL
);
"""
# An inbox of an earlier version (`id` a random UUID as its key, no `seq`): its rows are copied in the best order
# it knows, their arrival time.
_MIGRATE_INBOX = f"""
BEGIN IMMEDIATE;
ALTER TABLE inbox RENAME TO inbox_before_seq;
{_INBOX}
INSERT INTO inbox (id, sid, received_at, message)
    SELECT id, sid, received_at, message FROM inbox_before_seq ORDER BY received_at, rowid;
DROP TABLE inbox_before_seq;
COMMIT;
"""


def _setup(conn: sqlite3.Connection) -> None:
    conn.executescript(_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(inbox)")}
    conn.executescript(_MIGRATE_INBOX if columns and "seq" not in columns else _INBOX)


T = TypeVar("T")


class _InboxIds:
    """Inbox ids: a random prefix per store and a count, unique across restarts like a UUID (the column is UNIQUE)
    without a system call per received message (one that releases the GIL hands the loop's core to a thread)."""

    __slots__ = ("_prefix", "_count")

    def __init__(self) -> None:
        self._prefix = os.urandom(10).hex()
        self._count = itertools.count(1)

    def next(self) -> str:
        """A new id."""
        return f"{self._prefix}{next(self._count):012x}"


_TRIM_EVERY = 64  # with retain_turns, a session is trimmed on its first append and then on every 64th


class HistoryError(RuntimeError):
    """The history store is not open, or its database failed; the message says which and why."""


class TurnNotFoundError(HistoryError, LookupError):
    """No turn has this id (it was deleted, pruned, or never existed)."""


@dataclass(slots=True)
class Turn:
    """One completed turn of a session: its messages in order (user, assistant, tool calls and results) and meta."""

    id: int
    sid: str
    created_at: float
    messages: list[ChatMessage]
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True)
class InboxEntry:
    """A received message the durable inbox holds: not answered yet, or set aside as poison.

    `message` is the record the pipeline wrote (`core.pipeline.inbox_record`); `attempts` counts the turns that
    started for it (a process that died mid-turn counted one); `set_aside_at` is when it was set aside as poison
    (None: it still waits for an answer)."""

    id: str
    sid: str
    received_at: float
    message: dict[str, Any]
    attempts: int = 0
    set_aside_at: float | None = None

    def summary(self) -> dict[str, Any]:
        """What `hookchat status --json` and the console show of it: ids, times, attempts and the message's text."""
        return {
            "id": self.id,
            "sid": self.sid,
            "received_at": self.received_at,
            "attempts": self.attempts,
            "set_aside_at": self.set_aside_at,
            "text": str(self.message.get("text", "")),
        }


class SessionHistory(Protocol):
    """What the app, the pipeline and the agent loop use of a history store: `HistoryStore` (SQLite, one process)
    and a cluster worker's shared history (`core.cluster`) both provide it."""

    async def open(self) -> None:
        """Make the store usable."""
        ...

    async def close(self) -> None:
        """Finish pending writes and release the store."""
        ...

    async def get_history(self, sid: str) -> list[ChatMessage]:
        """The session's newest turns' messages, oldest first, within the store's bounds."""
        ...

    async def append_turn(
        self, sid: str, messages: list[ChatMessage], meta: dict[str, Any] | None = None, *, done: Sequence[str] = ()
    ) -> int:
        """Store a completed turn, marking the inbox entries `done` (the messages it answered); returns its id."""
        ...

    def mark_done(self, ids: Sequence[str]) -> Awaitable[None] | None:
        """Mark inbox entries done without a turn (an awaitable, or None when there were none)."""
        ...

    def record_received(self, sid: str, message: dict[str, Any], received_at: float | None = None) -> str:
        """Record a received message in the inbox; returns its inbox id."""
        ...

    async def unfinished(self) -> list[tuple[str, str, float, dict[str, Any]]]:
        """Inbox entries not done: `(id, sid, received_at, message)`."""
        ...

    async def list_turns(self, sid: str, limit: int | None = None) -> list[Turn]:
        """The session's turns, oldest first."""
        ...

    async def clear(self, sid: str) -> int:
        """Delete every turn of a session; returns how many there were."""
        ...

    async def sessions(self) -> list[str]:
        """The ids of the sessions that have turns, sorted."""
        ...


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """Approximate tokens of `messages`: 4 per message plus ceil(chars / 4) of its content and tool calls.

    Characters counted are the content, each tool call's name and raw arguments. It is an estimate (chars/4 fits
    English; other scripts use more tokens per character), good enough for bounding the history sent to a model.
    """
    total = 0
    for m in messages:
        chars = len(m.content)
        for call in m.tool_calls:
            chars += len(call.name) + len(call.raw_arguments or "")
        total += 4 + (chars + 3) // 4
    return total


def _encode(messages: list[ChatMessage]) -> str:
    for m in messages:
        if not isinstance(m, ChatMessage):
            raise TypeError(f"history messages must be ChatMessage, not {type(m).__name__}")
    # valid_text: a lone surrogate would make the insert raise UnicodeEncodeError and lose the whole turn.
    return valid_text(json.dumps([m.to_dict() for m in messages], ensure_ascii=False, separators=(",", ":")))


def _decode(text: str) -> list[ChatMessage]:
    return [ChatMessage.from_dict(d) for d in json.loads(text)]


#: Stored turns kept decoded by the worker (by their stored text), so a session's history is not parsed again at
#: every turn: at 100 busy sessions with 50 turns of history each, decoding was half the cost of a turn.
_DECODED_MAX = 16_384


class _DecodedTurns:
    """Stored turn text -> its messages, decoded once; the worker thread's alone. Keyed by the text itself, so an
    edited, deleted or rolled-back turn can never be served stale (its text is another key, or none). Each read
    gets fresh message objects: a caller may edit what it was given."""

    __slots__ = ("_turns",)

    def __init__(self) -> None:
        self._turns: dict[str, tuple[ChatMessage, ...]] = {}

    def messages(self, text: str) -> list[ChatMessage]:
        """The messages stored as `text`, as new objects."""
        turns = self._turns
        decoded = turns.get(text)
        if decoded is None:
            decoded = tuple(_decode(text))
            if len(turns) >= _DECODED_MAX:
                del turns[next(iter(turns))]  # the oldest decoded
            turns[text] = decoded
        return copy_messages(decoded)


def copy_messages(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """New objects equal to `messages` (decoded once and kept), which a caller may edit."""
    return [
        ChatMessage(m.role, m.content, [], m.tool_call_id, m.name)
        if not m.tool_calls
        else ChatMessage.from_dict(m.to_dict())  # tool calls hold dicts of arguments: copied whole
        for m in messages
    ]


def _row_to_turn(row: tuple[Any, ...]) -> Turn:
    return Turn(id=row[0], sid=row[1], created_at=row[2], messages=_decode(row[3]), meta=json.loads(row[4]))


def _log_inbox_failure(fut: asyncio.Future[Any]) -> None:
    if not fut.cancelled() and fut.exception() is not None:
        logger.error("the inbox could not be written: %s", fut.exception())


def _check_limit(name: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ValueError(f"{name} must be >= 0 or None, not {value}")


class HistoryStore:
    """Completed turns of every session in one SQLite file, with an async API for the pipeline and plugins.

    One worker thread (a `SqliteWorker`) owns the only connection and runs every query, taken from a FIFO queue;
    jobs queued while a transaction runs are committed together in the next one (group commit), and each caller's
    await returns after the commit that contains its job. So operations take effect in the order they were called, a read sees every
    write called before it, and a turn whose `append_turn` returned survives a crash of the process (WAL with
    `synchronous=NORMAL`; pass `synchronous="FULL"` to also survive power loss, at an fsync per commit).

    `max_turns` and `max_tokens` are the default bounds of `get_history` (None: unbounded). `retain_turns` (None:
    keep everything) trims each session on disk to its newest `retain_turns` turns on its first append after open
    and then on every 64th, so a session holds at most 63 turns more. A job whose caller was cancelled still runs.
    The store needs the asyncio event loop (anyio's asyncio backend); use it from the loop that opened it.
    """

    def __init__(
        self,
        path: Path | str,
        *,
        max_turns: int | None = 50,
        max_tokens: int | None = None,
        retain_turns: int | None = None,
        synchronous: Literal["NORMAL", "FULL"] = "NORMAL",
    ) -> None:
        _check_limit("max_turns", max_turns)
        _check_limit("max_tokens", max_tokens)
        if retain_turns is not None and retain_turns < 1:
            raise ValueError(f"retain_turns must be >= 1 or None, not {retain_turns}")
        if synchronous not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be 'NORMAL' or 'FULL', not {synchronous!r}")
        self.path = path if str(path) == ":memory:" else Path(path)
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.retain_turns = retain_turns
        self.synchronous: Literal["NORMAL", "FULL"] = synchronous
        self._worker: SqliteWorker | None = None
        self._appends_since_trim: dict[str, int] = {}  # per session; only the worker thread touches it
        self._decoded = _DecodedTurns()  # likewise
        self._inbox_ids = _InboxIds()

    # -- lifecycle -------------------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Start the worker thread, open (or create) the database and its schema. Raises `HistoryError`."""
        if self._worker is not None:
            raise HistoryError("history store is already open")
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise HistoryError("HistoryStore needs a running asyncio event loop (anyio's asyncio backend)") from None
        self._appends_since_trim = {}
        worker = self._worker = SqliteWorker(
            self.path,
            name="history database",
            setup=_setup,
            group_commit=True,  # each caller's await returns after the commit that holds its job: durable
            synchronous=self.synchronous,
            database_error=lambda exc: HistoryError(f"history database {self.path} failed: {exc}"),
        )
        try:
            await worker.open()
        except BaseException as exc:  # failed or cancelled: stop the worker
            self._worker = None
            await worker.close()
            if isinstance(exc, SqliteOpenError):
                raise HistoryError(f"cannot open history database {self.path}: {exc.__cause__}") from exc.__cause__
            raise

    async def close(self) -> None:
        """Finish every queued job, then close the database. Safe to call twice."""
        worker, self._worker = self._worker, None
        if worker is not None:
            await worker.close()

    async def __aenter__(self) -> HistoryStore:
        await self.open()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- the pipeline's API ----------------------------------------------------------------------------------------

    async def append_turn(
        self, sid: str, messages: list[ChatMessage], meta: dict[str, Any] | None = None, *, done: Sequence[str] = ()
    ) -> int:
        """Append one completed turn of session `sid` in one transaction and return its id; the inbox entries
        `done` (the messages it answered) are marked done in the same transaction.

        The turn is committed when this returns. Raises `TypeError` for a message that is not a `ChatMessage` or meta
        that is not JSON-serialisable, before anything is queued.
        """
        text = _encode(messages)  # first: it checks the message types
        row = (sid, time.time(), estimate_tokens(messages), text, json.dumps(meta or {}))
        retain, since_trim = self.retain_turns, self._appends_since_trim
        answered = [(i,) for i in done]

        def job(conn: sqlite3.Connection) -> int:
            turn_id = conn.execute(
                "INSERT INTO turns (sid, created_at, tokens, messages, meta) VALUES (?, ?, ?, ?, ?)", row
            ).lastrowid
            assert turn_id is not None  # an INSERT always sets the row id
            if answered:
                conn.executemany("DELETE FROM inbox WHERE id = ?", answered)
            if retain is not None:
                # Trimming costs a walk over `retain` index entries, so do it once per _TRIM_EVERY appends of the
                # session, and on its first append since open (a restart must not postpone it for ever). A job the
                # worker runs again after a rollback counts twice: the trim only comes a little early.
                count = since_trim.get(sid, _TRIM_EVERY)
                if count >= _TRIM_EVERY:
                    conn.execute(
                        "DELETE FROM turns WHERE sid = ?1 AND id <= "
                        "(SELECT id FROM turns WHERE sid = ?1 ORDER BY id DESC LIMIT 1 OFFSET ?2)",
                        (sid, retain),
                    )
                    count = 0
                since_trim[sid] = count + 1
            return turn_id

        return await self._submit(job)

    async def get_history(
        self, sid: str, *, max_turns: int | None = None, max_tokens: int | None = None
    ) -> list[ChatMessage]:
        """The messages of the session's newest turns, oldest first, within the bounds.

        Whole turns only: the newest turns whose count is at most `max_turns` and whose `estimate_tokens` sum is
        at most `max_tokens`; a turn that would overflow the token budget ends the history there (it is never cut
        in half, so tool calls keep their results). Each bound left None takes the store's default.
        """
        turns = self.max_turns if max_turns is None else max_turns
        tokens = self.max_tokens if max_tokens is None else max_tokens
        _check_limit("max_turns", turns)
        _check_limit("max_tokens", tokens)
        decoded = self._decoded

        def job(conn: sqlite3.Connection) -> list[ChatMessage]:
            picked: list[str] = []
            used = 0
            rows = conn.execute(
                "SELECT tokens, messages FROM turns WHERE sid = ? ORDER BY id DESC LIMIT ?",
                (sid, -1 if turns is None else turns),
            )
            for turn_tokens, text in rows:
                used += turn_tokens
                if tokens is not None and used > tokens:
                    break
                picked.append(text)
            out: list[ChatMessage] = []
            for text in reversed(picked):
                out.extend(decoded.messages(text))
            return out

        return await self._submit(job)

    # -- the plugins' editing API ----------------------------------------------------------------------------------

    async def list_turns(self, sid: str, limit: int | None = None) -> list[Turn]:
        """The session's turns oldest first; with `limit`, only the newest `limit` of them."""
        _check_limit("limit", limit)

        def job(conn: sqlite3.Connection) -> list[Turn]:
            rows = conn.execute(
                "SELECT id, sid, created_at, messages, meta FROM turns WHERE sid = ? ORDER BY id DESC LIMIT ?",
                (sid, -1 if limit is None else limit),
            ).fetchall()
            return [_row_to_turn(r) for r in reversed(rows)]

        return await self._submit(job)

    async def get_turn(self, turn_id: int) -> Turn | None:
        """The turn with this id, or None."""

        def job(conn: sqlite3.Connection) -> Turn | None:
            row = conn.execute(
                "SELECT id, sid, created_at, messages, meta FROM turns WHERE id = ?", (turn_id,)
            ).fetchone()
            return None if row is None else _row_to_turn(row)

        return await self._submit(job)

    async def replace_turn(self, turn_id: int, messages: list[ChatMessage], meta: dict[str, Any] | None = None) -> None:
        """Replace the messages (and, if given, the meta) of a turn; its id, session and time stay.

        Raises `TurnNotFoundError` when no turn has this id, so an edit is never lost silently.
        """
        text, turn_tokens = _encode(messages), estimate_tokens(messages)
        meta_text = None if meta is None else json.dumps(meta)

        def job(conn: sqlite3.Connection) -> None:
            cur = conn.execute(
                "UPDATE turns SET messages = ?, tokens = ?, meta = coalesce(?, meta) WHERE id = ?",
                (text, turn_tokens, meta_text, turn_id),
            )
            if cur.rowcount == 0:
                raise TurnNotFoundError(f"no history turn has id {turn_id}")

        await self._submit(job)

    async def delete_turn(self, turn_id: int) -> bool:
        """Delete a turn; True if it existed."""
        return await self._submit(lambda conn: conn.execute("DELETE FROM turns WHERE id = ?", (turn_id,)).rowcount > 0)

    async def clear(self, sid: str) -> int:
        """Delete every turn of a session; returns how many there were."""
        return await self._submit(lambda conn: conn.execute("DELETE FROM turns WHERE sid = ?", (sid,)).rowcount)

    async def sessions(self) -> list[str]:
        """The ids of every session that has at least one turn, sorted."""
        return await self._submit(
            lambda conn: [r[0] for r in conn.execute("SELECT DISTINCT sid FROM turns ORDER BY sid")]
        )

    # -- the worker ------------------------------------------------------------------------------------------------

    # -- the durable inbox -----------------------------------------------------------------------------------------

    def record_received(self, sid: str, message: dict[str, Any], received_at: float | None = None) -> str:
        """Queue the record of a received message (`message`: JSON data the app can rebuild it from) and return
        its inbox id at once. Not awaited, so receiving never waits for the disk; durable all the same before its
        turn starts, since jobs run in order and the turn's first query (its history) returns only after the
        commit that holds this record. A failure is logged."""
        inbox_id = self._inbox_ids.next()
        row = (inbox_id, sid, time.time() if received_at is None else received_at, valid_text(json.dumps(message)))
        self._submit(
            lambda conn: conn.execute("INSERT INTO inbox (id, sid, received_at, message) VALUES (?, ?, ?, ?)", row)
        ).add_done_callback(_log_inbox_failure)
        return inbox_id

    def mark_done(self, ids: Sequence[str]) -> asyncio.Future[None] | None:
        """Queue marking inbox entries done without a turn (discarded, stopped, cancelled, reset, or answered
        otherwise); returns the job's future (None when there is nothing to do), which callers may await. A failure
        is logged."""
        rows = [(i,) for i in ids]
        if not rows:
            return None
        fut = self._submit(lambda conn: conn.executemany("DELETE FROM inbox WHERE id = ?", rows) and None)
        fut.add_done_callback(_log_inbox_failure)
        return fut

    async def unfinished(self) -> list[tuple[str, str, float, dict[str, Any]]]:
        """Inbox entries not done and not set aside, in arrival order: `(id, sid, received_at, message)`; after a
        crash, the messages received and never answered."""
        return [(e.id, e.sid, e.received_at, e.message) for e in await self.waiting()]

    async def waiting(self) -> list[InboxEntry]:
        """The entries still waiting for an answer (not set aside), in arrival order, with their attempts."""
        return await self._entries("set_aside_at IS NULL")

    async def poisoned(self) -> list[InboxEntry]:
        """The entries set aside as poison (every attempt to answer them ended the process), in arrival order.
        They stay until removed with `mark_done`."""
        return await self._entries("set_aside_at IS NOT NULL")

    async def start_attempt(self, ids: Sequence[str]) -> None:
        """Count one more attempt for each of the entries `ids` (a turn for them starts now); committed when this
        returns, so a process that dies during the turn has counted it."""
        rows = [(i,) for i in ids]
        if rows:
            await self._submit(
                lambda conn: conn.executemany("UPDATE inbox SET attempts = attempts + 1 WHERE id = ?", rows) and None
            )

    async def set_aside(self, ids: Sequence[str]) -> None:
        """Set the entries `ids` aside as poison: kept (see `poisoned`), never replayed again."""
        now, rows = time.time(), [(i,) for i in ids]
        if rows:
            await self._submit(
                lambda conn: (
                    conn.executemany(
                        "UPDATE inbox SET set_aside_at = ? WHERE id = ? AND set_aside_at IS NULL",
                        [(now, *row) for row in rows],
                    )
                    and None
                )
            )

    async def _entries(self, where: str) -> list[InboxEntry]:
        rows = await self._submit(
            lambda conn: conn.execute(
                "SELECT id, sid, received_at, message, attempts, set_aside_at FROM inbox WHERE "
                + where
                + " ORDER BY seq"
            ).fetchall()
        )
        return [InboxEntry(r[0], r[1], r[2], json.loads(r[3]), r[4], r[5]) for r in rows]

    def _submit(self, fn: Callable[[sqlite3.Connection], T]) -> asyncio.Future[T]:
        if self._worker is None:
            raise HistoryError("history store is not open (call `await store.open()` or use `async with`)")
        return self._worker.submit(fn)
