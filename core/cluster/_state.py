"""The state every worker reaches, in JetStream key-value buckets: session history (`ClusterHistory`, the
`SessionHistory` of a worker's app), buffered messages, and plugins' stores (`ClusterPluginStore`).

Each session's history is a head value (its newest turns and answered ids, and the keys of its sealed chunks),
changed by compare-and-set on its revision: a turn is stored at most once, even when two workers race for a moved
partition, and a redelivered message whose turn is stored is recognised by its id. Once the head's turns or ids pass
a size, the next write first seals them into an immutable chunk (its key a hash of its content), so what a turn
writes stays bounded however long the session (`ClusterHistory._next_head`; docs/scale-out.md).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Container, Iterable, Sequence
from typing import Any, NamedTuple, TypeVar

import nats.js.errors
from nats.js.kv import KeyValue

from core.cluster._bus import NATS_ERRORS, Bus, decode_key, encode_key, to_json
from core.history import HistoryError, Turn, copy_messages, estimate_tokens
from core.provider import ChatMessage
from core.services import Err, Ok, Result, SdkError
from core.utils.log import logger

__all__ = ["ClusterHistory", "ClusterPluginStore", "PartitionMoved"]

T = TypeVar("T")

_DONE_KEPT = 4096  # ids of answered messages kept per session: far more than any redelivery can lag behind
_HEAD_BYTES = 8192  # a head's turns (their JSON) at least this long are sealed into a chunk by the next write
_HEAD_IDS = 256  # and its answered ids, at least this many
_CAS_TRIES = 20
#: Seconds a turn's read or write keeps retrying while the server is away (a restart), before the turn gives up.
PATIENCE = 300.0


async def _read(kv: KeyValue, key: str) -> tuple[dict[str, Any] | None, int]:
    """The JSON value under `key` and its revision; (None, 0) when never set, (None, revision of the deletion) when
    deleted, so that the next write is one conditional update (`create` would first fail on the deletion)."""
    try:
        entry = await kv.get(key)
    except nats.js.errors.KeyNotFoundError as exc:  # `entry` is the deletion's, when there is one
        return None, (exc.entry.revision or 0) if exc.entry is not None else 0
    if not entry.value:
        return None, entry.revision or 0
    return json.loads(entry.value), entry.revision or 0


def _encode(value: dict[str, Any]) -> bytes:
    return to_json(value).encode()


class _Turn(dict[str, Any]):
    """A stored turn of a history value, which is never changed once made: its JSON is made once and kept, not
    made again at every later turn's write of the value (up to `history_turns` of them), and so are its messages
    decoded (each read gets copies, as `HistoryStore`'s do)."""

    __slots__ = ("json", "decoded")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.json: str | None = None
        self.decoded: tuple[ChatMessage, ...] | None = None


def _messages_of(turn: dict[str, Any]) -> Sequence[ChatMessage]:
    """A stored turn's messages as decoded and kept, which a caller must not change (`copy_messages` copies)."""
    if not isinstance(turn, _Turn):  # read from the server: a `_Turn` once the value is written again
        return [ChatMessage.from_dict(m) for m in turn["messages"]]
    if turn.decoded is None:
        turn.decoded = tuple(ChatMessage.from_dict(m) for m in turn["messages"])
    return turn.decoded


class _Done(list[str]):
    """The ids of the messages a head's turns answered (at most `_HEAD_IDS` and a batch), never changed once made
    (`plus` makes the next). A redelivery's check is a lookup, not a scan, and a write adds the new ids' JSON to the
    kept JSON of the others instead of encoding them all again.

    The lookup: an index of id -> number, shared with the values `plus` made from this one (each adds its ids with
    higher numbers), and the count of numbers this value holds."""

    __slots__ = ("_index", "_high", "json")
    _index: dict[str, int]
    _high: int
    json: str  # the ids as a JSON array's items, "," between them

    def __init__(self, ids: Iterable[str] = ()) -> None:
        super().__init__(ids)
        self._index = {i: n for n, i in enumerate(self)}
        self._high = len(self)
        self.json = ",".join(map(to_json, self))

    def __contains__(self, item: object) -> bool:
        number = self._index.get(item)  # type: ignore[call-overload] - any object may be asked for
        return number is not None and number < self._high

    def plus(self, ids: Sequence[str]) -> _Done:
        """These ids and then `ids`."""
        if any(i in self for i in ids):  # answered again: its new number in the shared index would hide it here
            return _Done([*self, *ids])
        done = _Done.__new__(_Done)
        list.__init__(done, [*self, *ids])
        done._index, done._high = self._index, self._high + len(ids)
        for n, i in enumerate(ids, start=self._high):
            done._index[i] = n
        added = ",".join(map(to_json, ids))
        done.json = f"{self.json},{added}" if self.json and added else self.json or added
        return done


def _done_of(value: dict[str, Any]) -> _Done:
    """The value's answered ids as a `_Done` (made one, in the value, when read from the server)."""
    done = value["done"]
    if not isinstance(done, _Done):
        done = value["done"] = _Done(done)
    return done


def _turns_json(turns: list[dict[str, Any]]) -> list[str]:
    """The JSON of each of `turns`, from its `_Turn` (each turn read from the server is made one, in `turns`)."""
    parts = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, _Turn):
            turn = turns[i] = _Turn(turn)
        if turn.json is None:
            turn.json = to_json(turn)
        parts.append(turn.json)
    return parts


def _encode_history(value: dict[str, Any]) -> bytes:
    """A history head as JSON, each turn's from its `_Turn` and the answered ids from their `_Done` (made so here
    when read from the server)."""
    head = '{"turns":[' + ",".join(_turns_json(value["turns"])) + "]"
    if "done" in value:
        head += ',"done":[' + _done_of(value).json + "]"
    rest = to_json({k: v for k, v in value.items() if k not in ("turns", "done")})
    return (head + ("," + rest[1:] if rest != "{}" else "}")).encode()


class _Seal(NamedTuple):
    """A chunk a head's next write seals: stored (a plain put) before the head that names it."""

    key: str
    data: bytes
    decoded: Any  # as `_Chunks` keeps it: a list of `_Turn`s, or a frozenset of ids


def _digest(data: bytes) -> str:
    """A chunk's name within its session: a hash of its content, so a write made again from the same head (after a
    crash, or a lost race) puts the same content under the same key, never another content."""
    return hashlib.blake2b(data, digest_size=12).hexdigest()


def _seal_turns(key: str, turns: list[dict[str, Any]]) -> tuple[_Seal, list[Any]]:
    """The chunk of `turns` of the session under `key`, and its reference in its head ([digest, turn count])."""
    data = ('{"turns":[' + ",".join(_turns_json(turns)) + "]}").encode()
    digest = _digest(data)
    return _Seal(f"{key}.t.{digest}", data, list(turns)), [digest, len(turns)]


def _seal_ids(key: str, number: int, done: _Done) -> tuple[_Seal, list[Any]]:
    """The chunk of the answered ids `done` of the session under `key`, sealed by its turn `number` (which makes
    each chunk's content its own), and its reference in its head ([digest, id count])."""
    data = f'{{"next":{number},"done":[{done.json}]}}'.encode()
    digest = _digest(data)
    return _Seal(f"{key}.d.{digest}", data, frozenset(done)), [digest, len(done)]


def _drop_old(chunks: list[list[Any]], newer: int, kept: int) -> list[list[Any]]:
    """Take the oldest references out of `chunks` (oldest first, each ending with its count of items) while the
    chunks after them and the head's `newer` items hold `kept` items without them; return them."""
    total = newer + sum(c[-1] for c in chunks)
    dropped = []
    while chunks and total - chunks[0][-1] >= kept:
        total -= chunks[0][-1]
        dropped.append(chunks.pop(0))
    return dropped


def _chunk_turns(value: dict[str, Any]) -> list[_Turn]:
    return [_Turn(t) for t in value["turns"]]


def _chunk_ids(value: dict[str, Any]) -> frozenset[str]:
    return frozenset(value["done"])


async def _write(
    bus: Bus,
    kv: KeyValue,
    key: str,
    value: dict[str, Any] | None,
    revision: int,
    encode: Callable[[dict[str, Any]], bytes] = _encode,
) -> int | None:
    """Compare-and-set: write (or delete, for None) only if `key` is still at `revision`. The new revision (that of
    the deletion marker after a deletion, so the next write to the key needs no read first); None if the key had
    moved on."""
    data = None if value is None else encode(value)
    try:
        return await bus.write(kv, key, data, revision)
    except nats.js.errors.KeyWrongLastSequenceError:
        return None


_Change = Callable[[dict[str, Any] | None], dict[str, Any] | None]


class _Answered:
    """The ids a session's turns answered: its head's and those of the sealed chunks its head names."""

    __slots__ = ("_head", "_sealed")

    def __init__(self, head: _Done, sealed: Sequence[frozenset[str]]) -> None:
        self._head = head
        self._sealed = sealed

    def __contains__(self, item: object) -> bool:
        return item in self._head or any(item in ids for ids in self._sealed)


class _ChunkGone(HistoryError):
    """A head named a chunk that is no longer stored: the head was read before a later write dropped the chunk."""


class _Chunks:
    """Sealed chunks of session histories as decoded, the newest `size` used. A chunk never changes (its key is a
    hash of its content), so a worker reads each at most once while it is kept here, whoever owns its session."""

    def __init__(self, size: int = 1_024) -> None:
        self._size = size
        self._decoded: OrderedDict[str, Any] = OrderedDict()

    def get(self, key: str) -> Any:
        """The chunk under `key` as decoded, if it is kept here (None otherwise)."""
        found = self._decoded.get(key)
        if found is not None:
            self._decoded.move_to_end(key)
        return found

    def keep(self, key: str, decoded: Any) -> None:
        """Keep a chunk read or written."""
        self._decoded[key] = decoded
        if len(self._decoded) > self._size:
            self._decoded.popitem(last=False)

    async def load(self, kv: KeyValue, keys: Sequence[str], decode: Callable[[dict[str, Any]], Any]) -> list[Any]:
        """The chunks under `keys`, decoded by `decode`; those not kept here are read together. `_ChunkGone` when
        one is not stored."""
        found = {k: self.get(k) for k in keys}
        missing = [k for k, decoded in found.items() if decoded is None]
        if not missing:
            return list(found.values())
        for key, (value, _) in zip(missing, await asyncio.gather(*(_read(kv, k) for k in missing)), strict=True):
            if value is None:
                raise _ChunkGone(f"the history chunk {key} is not stored (the head naming it is old)")
            found[key] = decoded = decode(value)
            self.keep(key, decoded)
        return [found[k] for k in keys]


class _OwnedValues:
    """The values (and revisions) of the sessions a worker owns, as it last read or wrote them, newest `size`.

    While a worker holds a partition's lease no other worker writes its sessions' values, so reading them again
    needs no round trip; a write still sends the revision it started from, so one that raced a stalled worker
    finds the value moved and reads it again. A partition's values are forgotten whenever its ownership changes,
    and only used while this worker owns the session (`owns`)."""

    def __init__(self, bus: Bus, owns: Callable[[str], bool], size: int = 2_000) -> None:
        self._bus = bus
        self._owns = owns
        self._partition = bus.partition
        self._size = size
        self._values: OrderedDict[tuple[str, str], tuple[str, dict[str, Any] | None, int]] = OrderedDict()

    async def read(self, kv: KeyValue, key: str, sid: str) -> tuple[dict[str, Any] | None, int]:
        """`_read`, from memory when this worker owns `sid` and read or wrote the key since it took the partition."""
        slot = (kv._name, key)
        if self._owns(sid) and (known := self._values.get(slot)) is not None:
            self._values.move_to_end(slot)
            return known[1], known[2]
        value, revision = await _read(kv, key)
        self._keep(slot, sid, value, revision)
        return value, revision

    def _keep(self, slot: tuple[str, str], sid: str, value: dict[str, Any] | None, revision: int) -> None:
        if not self._owns(sid):
            return
        self._values[slot] = (sid, value, revision)
        self._values.move_to_end(slot)
        if len(self._values) > self._size:
            self._values.popitem(last=False)

    async def change(
        self,
        kv: KeyValue,
        key: str,
        sid: str,
        change: _Change,
        what: str,
        encode: Callable[[dict[str, Any]], bytes] = _encode,
        load: Callable[[str, dict[str, Any] | None], Awaitable[Any] | None] | None = None,
        store: Callable[[str], Awaitable[None] | None] | None = None,
    ) -> dict[str, Any] | None:
        """Apply `change` to the value under `key` by compare-and-set, starting from the value in memory, and
        again from the server's whenever another writer came first. `load(key, value)` runs before each `change`
        (to read what `change` needs besides the value; a `_ChunkGone` from either reads the value again), and
        `store(key)` after it, before the new value is written (to store what the new value names); what they
        return is awaited."""
        slot = (kv._name, key)
        for _ in range(_CAS_TRIES):
            value, revision = await self.read(kv, key, sid)
            try:
                if load is not None and (loading := load(key, value)) is not None:
                    await loading
                new = change(value)
            except _ChunkGone:  # read a value another writer has moved on from
                self._values.pop(slot, None)
                continue
            if new is value:
                return value
            if store is not None and (storing := store(key)) is not None:
                await storing
            try:
                written = await _write(self._bus, kv, key, new, revision, encode)
            except BaseException:  # it may have been stored with its answer lost: read it again next time
                self._values.pop(slot, None)
                raise
            if written is None:  # another writer came first: read it again
                self._values.pop(slot, None)
                await asyncio.sleep(0)
                continue
            self._keep(slot, sid, new, written)
            return new
        raise HistoryError(f"{what}: gave up after {_CAS_TRIES} concurrent writers")

    def drop(self, kv: KeyValue, key: str) -> None:
        """Read the value under `key` from the server next time."""
        self._values.pop((kv._name, key), None)

    def forget(self, partition: int) -> None:
        """Ownership of `partition` changed: its sessions' values are read from the server again."""
        for slot in [slot for slot, (sid, _, _) in self._values.items() if self._partition(sid) == partition]:
            del self._values[slot]


class PartitionMoved(HistoryError):
    """A session's partition belongs to another worker now: that worker answers the session's messages."""


class ClusterHistory:
    """Session history in the cluster's `history` bucket, with the `SessionHistory` interface of `HistoryStore`.

    The worker's inbox is JetStream itself, so `record_received` is never called (the pipeline is given the
    message's id) and `unfinished` is empty; `done(ids)` is called once the messages `ids` are answered (their
    turn stored) or dropped, and acknowledges them. Buffered messages are parked in the `buffers` bucket under
    their partition (`park`), so the partition's next owner finds them (`parked`).

    A turn's reads and writes wait for a server that is away (`patiently`): the turn stays where it is, so the
    session's later messages stay queued behind it, in order. They give up (`HistoryError`) once the worker no
    longer owns the session's partition (its next owner answers the turn) or after `PATIENCE` seconds.
    """

    def __init__(
        self,
        bus: Bus,
        *,
        max_turns: int | None,
        max_tokens: int | None,
        done: Callable[[Sequence[str]], Awaitable[None]],
        owns: Callable[[str], bool] = lambda sid: True,
        confirm: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        self.bus = bus
        self._owns = owns
        self._confirm = confirm
        self._values = _OwnedValues(bus, owns)
        self._chunks = _Chunks()
        self._sealing: dict[str, list[_Seal]] = {}  # session key -> chunks its next head write names, to store first
        #: Ids of messages whose turn could not begin (its batch was not written down): not done, left parked
        #: for the partition's next owner or this worker's sweep.
        self.abandoned: set[str] = set()
        self.max_turns = max_turns
        self.max_tokens = max_tokens
        self.keep = bus.config.history_turns
        self._done = done
        self._parked: dict[str, str] = {}  # id of a parked message -> its session
        self._answered: dict[str, set[str]] = {}  # session -> ids answered by a stored turn, still parked (`tidy`)

    @property
    def _kv(self) -> KeyValue:
        if self.bus.history is None:
            raise HistoryError("the cluster history is not open (the bus is not connected)")
        return self.bus.history

    async def open(self) -> None:
        """Nothing to open: the bus holds the buckets (it must be connected first)."""
        self._kv  # noqa: B018 - raises when the bus is not connected

    async def close(self) -> None:
        """Nothing to close: the bus owns the connection."""

    async def _still_owned(self, sid: str) -> bool:
        """Whether this worker owns `sid`'s partition, asked of the server (its own view may be a stall old)."""
        return self._owns(sid) and (self._confirm is None or await self._confirm(sid))

    async def patiently(self, sid: str, what: str, job: Callable[[], Awaitable[T]]) -> T:
        """`await job()`, again after a pause while the server cannot be reached, as long as this worker owns
        `sid`'s partition and for at most `PATIENCE` seconds; then `HistoryError`, saying `what` failed."""
        began = time.monotonic()
        pause = 0.1
        while True:
            try:
                return await job()
            except PartitionMoved:
                raise
            except (HistoryError, *NATS_ERRORS) as exc:
                if not self._owns(sid):
                    raise PartitionMoved(f"{what}: its partition moved to another worker") from exc
                if time.monotonic() - began > PATIENCE:
                    raise HistoryError(f"{what}: the cluster was unreachable for {PATIENCE:.0f} s: {exc}") from exc
                if pause >= 2:
                    logger.warning("cluster: %s waits for the NATS server: %s", what, str(exc) or type(exc).__name__)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)

    async def _session(self, sid: str) -> dict[str, Any]:
        try:
            value, _ = await self._values.read(self._kv, encode_key(sid), sid)
        except NATS_ERRORS as exc:
            raise HistoryError(f"cluster history of {sid} unreachable: {exc}") from exc
        if value is None:
            return {"next": 1, "turns": [], "done": _Done()}
        _done_of(value)
        return value

    async def _with_chunks(self, sid: str, job: Callable[[str, dict[str, Any]], Awaitable[T]]) -> T:
        """`job(key, head)` on the session's head, read again from the server when a chunk it names is gone (a
        later write dropped it: the head was old)."""
        key = encode_key(sid)
        for _ in range(_CAS_TRIES):
            try:
                return await job(key, await self._session(sid))
            except _ChunkGone:
                self._values.drop(self._kv, key)
        raise HistoryError(f"reading the history of {sid}: its chunks kept moving")

    async def _turns(self, sid: str, want: int | None) -> list[dict[str, Any]]:
        """The session's newest `want` turns (all it keeps, for None), oldest first: the head's, and before them
        those of as many sealed chunks, newest first, as it takes."""
        want = self.keep if want is None else min(want, self.keep)
        head = await self._session(sid)
        if len(head["turns"]) >= want or "chunks" not in head:  # most turns: nothing sealed to read
            return head["turns"][-want:] if want else []

        async def job(key: str, head: dict[str, Any]) -> list[dict[str, Any]]:
            turns: list[dict[str, Any]] = head["turns"]
            have, needed = len(turns), []
            for digest, count in reversed(head.get("chunks", ())):
                if have >= want:
                    break
                needed.append(f"{key}.t.{digest}")
                have += count
            if needed:
                sealed = await self._chunks.load(self._kv, needed[::-1], _chunk_turns)
                turns = [turn for chunk in sealed for turn in chunk] + turns
            return turns[-want:] if want else []

        return await self._with_chunks(sid, job)

    async def _answered_ids(self, sid: str) -> Container[str]:
        """The ids of the messages the session's turns answered (its newest `_DONE_KEPT` or more)."""
        return await self._with_chunks(sid, self._answered_in)

    async def get_history(self, sid: str) -> list[ChatMessage]:
        """The newest turns' messages within `max_turns` and `max_tokens` (whole turns), oldest first."""
        what = f"reading the history of {sid}"
        head = await self.patiently(sid, what, lambda: self._session(sid))
        want = self.keep if self.max_turns is None else min(self.max_turns, self.keep)
        turns = head["turns"]
        if len(turns) < want and "chunks" in head:  # older turns are sealed in chunks
            turns = await self.patiently(sid, what, lambda: self._turns(sid, want))
        turns = turns[-want:] if want else []
        picked: list[dict[str, Any]] = []
        used = 0
        for turn in reversed(turns):
            used += turn["tokens"]
            if self.max_tokens is not None and used > self.max_tokens:
                break
            picked.append(turn)
        return copy_messages([m for turn in reversed(picked) for m in _messages_of(turn)])  # copied in one go

    async def is_done(self, sid: str, message_id: str) -> bool:
        """Whether the message `message_id` of `sid` was answered by a stored turn."""
        head = await self._session(sid)
        if "sealed" not in head:  # most sessions: all their answered ids in the head
            return message_id in head["done"]
        return message_id in await self._answered_ids(sid)

    async def seen(self, sid: str, message_id: str) -> bool:
        """Whether the message `message_id` of `sid` was answered, or is parked waiting for a turn: a second copy
        (a retried publish, or a redelivery after the server lost an acknowledgement) must be dropped."""
        if await self.is_done(sid, message_id):
            return True
        assert self.bus.buffers is not None
        value, _ = await self._values.read(self.bus.buffers, self._buffer_key(sid), sid)
        return value is not None and any(e["id"] == message_id for e in value["messages"])

    async def append_turn(
        self, sid: str, messages: list[ChatMessage], meta: dict[str, Any] | None = None, *, done: Sequence[str] = ()
    ) -> int:
        """Store a turn and the ids it answered in one compare-and-set of the session's head; a turn whose ids are
        all stored already (a redelivery that raced) is not stored twice. Then the parked ids leave the buffers and
        every id is acknowledged. Returns the turn's number within its session."""
        record = {
            "at": time.time(),
            "tokens": estimate_tokens(messages),
            "meta": meta or {},
            "messages": [m.to_dict() for m in messages],
        }
        if done and not self._owns(sid):  # the partition moved on: its new owner redoes this turn
            raise PartitionMoved(f"turn of {sid} not stored: its partition moved to another worker")
        key = encode_key(sid)
        number = 0
        gone: list[str] = []  # chunks the head stopped naming, to remove once it is written

        def change(value: dict[str, Any] | None) -> dict[str, Any] | None:
            nonlocal number
            value = value or {"next": 1, "turns": [], "done": _Done()}
            if done:
                answered = self._answered_loaded(key, value)
                if all(i in answered for i in done):
                    return value
            number = value["next"]
            head, seals, dropped = self._next_head(key, value, _Turn(id=number, **record), done)
            self._sealing[key] = seals
            gone[:] = [*value.get("gone", ()), *dropped] if dropped else ()
            return head

        what = f"storing a turn of {sid}"
        await self.patiently(
            sid,
            what,
            lambda: self._values.change(
                self._kv, key, sid, change, what, _encode_history, self._load_sealed, self._store_sealed
            ),
        )
        if gone:  # and those dropped last time again, in case that was cut short
            await self._remove_chunks(key, gone)
        await self._finish(done, stored=True)
        return number

    def _next_head(
        self, key: str, value: dict[str, Any], turn: _Turn, done: Sequence[str]
    ) -> tuple[dict[str, Any], list[_Seal], list[str]]:
        """The head after `value` with `turn` and its answered ids `done`; the chunks to store before it (the turns
        or ids of `value` past their size, sealed); the names of the chunks it no longer names. A function of the
        committed `value` alone, so a write made again after a crash seals the same chunks."""
        turns, ids, size = value["turns"], _done_of(value), value.get("size")
        if size is None:  # a head of the single-value layout
            size = sum(len(j) for j in _turns_json(turns))
        chunks, sealed, seals = value.get("chunks"), value.get("sealed"), []
        if size >= _HEAD_BYTES and turns:
            seal, reference = _seal_turns(key, turns)
            seals.append(seal)
            chunks = [*(chunks or ()), reference]
            turns, size = [], 0
        if len(ids) >= _HEAD_IDS:
            seal, reference = _seal_ids(key, value["next"], ids)
            seals.append(seal)
            sealed = [*(sealed or ()), reference]
            ids = _Done()
        turn.json = to_json(turn)
        turns = [*turns, turn]
        if len(turns) > self.keep:
            turns = turns[-self.keep :]
            size = sum(len(j) for j in _turns_json(turns))
        else:
            size += len(turn.json)
        head: dict[str, Any] = {"next": value["next"] + 1, "turns": turns, "done": ids.plus(done), "size": size}
        dropped: list[str] = []
        if chunks:
            chunks = [*chunks]
            dropped += [f"t.{d}" for d, _ in _drop_old(chunks, len(turns), self.keep)]
            if chunks:
                head["chunks"] = chunks
        if sealed:
            sealed = [*sealed]
            dropped += [f"d.{d}" for d, _ in _drop_old(sealed, len(head["done"]), _DONE_KEPT)]
            if sealed:
                head["sealed"] = sealed
        if dropped or value.get("gone"):
            head["gone"] = dropped or value["gone"]
        return head, seals, dropped

    def _load_sealed(self, key: str, value: dict[str, Any] | None) -> Awaitable[Any] | None:
        """Before a turn is stored on `value`: read the answered ids of the chunks it names (`_answered_loaded`)."""
        if value is None or "sealed" not in value:
            return None
        return self._chunks.load(self._kv, [f"{key}.d.{d}" for d, _ in value["sealed"]], _chunk_ids)

    def _answered_loaded(self, key: str, value: dict[str, Any]) -> Container[str]:
        """The ids answered as `value` says, its chunks' read by `_load_sealed` just before."""
        done = _done_of(value)
        if "sealed" not in value:
            return done
        sealed = [self._chunks.get(f"{key}.d.{d}") for d, _ in value["sealed"]]
        if any(ids is None for ids in sealed):  # not kept meanwhile: the caller reads the value again
            raise _ChunkGone(f"the answered ids of {decode_key(key)} were not kept")
        return _Answered(done, sealed)

    def _store_sealed(self, key: str) -> Awaitable[None] | None:
        """Before a head is written: store the chunks it names that `_next_head` sealed."""
        seals = self._sealing.pop(key, None)
        return self._store_chunks(seals) if seals else None

    async def _answered_in(self, key: str, head: dict[str, Any]) -> Container[str]:
        """The ids answered as `head` says: its own and those of the chunks it names."""
        done = _done_of(head)
        if not head.get("sealed"):
            return done
        return _Answered(
            done, await self._chunks.load(self._kv, [f"{key}.d.{d}" for d, _ in head["sealed"]], _chunk_ids)
        )

    async def _store_chunks(self, seals: list[_Seal]) -> None:
        """Store sealed chunks (plain puts: a chunk nothing names yet is harmless) before the head that names them."""
        await asyncio.gather(*(self.bus.put(self._kv, s.key, s.data) for s in seals))
        for seal in seals:
            self._chunks.keep(seal.key, seal.decoded)

    async def _remove_chunks(self, key: str, names: Sequence[str]) -> None:
        """Remove chunks the session's head no longer names; one left behind (the server away) is removed again at
        the head's next drop, or stays as a harmless orphan."""
        try:
            for name in dict.fromkeys(names):
                await self.bus.purge(self._kv, f"{key}.{name}")
        except NATS_ERRORS as exc:
            logger.warning("cluster: old history chunks of %s stay for now: %s", decode_key(key), exc)

    def mark_done(self, ids: Sequence[str]) -> Awaitable[None] | None:
        """The messages `ids` are answered without a turn (discarded, stopped): unpark and acknowledge them."""
        return asyncio.ensure_future(self._finish(ids, stored=False)) if ids else None

    async def _finish(self, ids: Sequence[str], *, stored: bool) -> None:
        """Unpark and acknowledge the answered messages `ids`. Those of a `stored` turn are in the session's
        history as answered, which every reader of the parked buffers checks: they leave the buffers with the
        session's next write there (`intend`) or at the next `tidy`, saving a write per turn. Messages dropped
        without a turn are recorded nowhere else, so they are unparked before they are acknowledged."""
        if self.abandoned.intersection(ids):  # not answered: left parked and held, to be retried
            self.abandoned.difference_update(ids)
            return
        by_session: dict[str, list[str]] = {}
        for i in ids:
            sid = self._parked.pop(i, None)
            if sid is not None:
                by_session.setdefault(sid, []).append(i)
        for sid, parked in by_session.items():
            if stored:
                self._answered.setdefault(sid, set()).update(parked)
            else:
                await self.unpark(sid, parked)
        await self._done(ids)

    async def tidy(self) -> None:
        """Take out of the parked buffers the answered messages that `append_turn` left there (the worker calls
        this each heartbeat): a session's parked buffer holds answered messages for at most that long."""
        answered, self._answered = self._answered, {}
        for sid, ids in answered.items():
            if self._owns(sid):  # otherwise the partition's next owner finds them answered and removes them
                await self.unpark(sid, list(ids))

    def record_received(self, sid: str, message: dict[str, Any], received_at: float | None = None) -> str:
        """Never used on a worker (JetStream holds each message until it is answered)."""
        raise HistoryError("a cluster worker's inbox is JetStream: pass the message's id to `receive`")

    async def unfinished(self) -> list[tuple[str, str, float, dict[str, Any]]]:
        """Empty: unanswered messages are redelivered by JetStream, not read back at start-up."""
        return []

    async def list_turns(self, sid: str, limit: int | None = None) -> list[Turn]:
        """The session's stored turns, oldest first (the newest `limit`)."""
        return [
            Turn(t["id"], sid, t["at"], [ChatMessage.from_dict(m) for m in t["messages"]], t["meta"])
            for t in await self._turns(sid, limit)
        ]

    async def clear(self, sid: str) -> int:
        """Delete the session's turns (the ids it answered stay, so a redelivery is still recognised)."""
        key = encode_key(sid)
        count = 0
        gone: list[str] = []

        def change(value: dict[str, Any] | None) -> dict[str, Any] | None:
            nonlocal count
            chunks = value.get("chunks", ()) if value else ()
            if not value or not (value["turns"] or chunks):
                return value
            count = min(len(value["turns"]) + sum(n for _, n in chunks), self.keep)
            gone[:] = [*value.get("gone", ()), *(f"t.{d}" for d, _ in chunks)]
            head = {k: v for k, v in value.items() if k not in ("chunks", "size")}
            return {**head, "turns": [], **({"gone": gone[:]} if gone else {})}

        await self._values.change(self._kv, key, sid, change, f"clearing {sid}")
        if gone:
            # Only those it named: a pattern would take a chunk a turn stored meanwhile sealed and named.
            await self._remove_chunks(key, gone)
        return count

    async def sessions(self) -> list[str]:
        """Every session with a stored value, sorted."""
        return sorted(decode_key(e.key) for e in await self.bus.entries("history", "*"))

    # -- buffered messages ------------------------------------------------------------------------------------------

    def _buffer_key(self, sid: str) -> str:
        return f"{self.bus.partition(sid)}.{encode_key(sid)}"

    async def park(self, sid: str, message_id: str, data: dict[str, Any]) -> None:
        """Keep a buffered message where the partition's next owner finds it, until its turn is stored."""
        buffers = self.bus.buffers
        assert buffers is not None
        self._parked[message_id] = sid

        def change(value: dict[str, Any] | None) -> dict[str, Any] | None:
            value = value or {"messages": [], "turns": []}
            if any(e["id"] == message_id for e in value["messages"]):
                return value
            return {**value, "messages": [*value["messages"], {"id": message_id, "data": data}]}

        what = f"buffering a message of {sid}"
        await self.patiently(sid, what, lambda: self._fenced(sid, what, buffers, change))

    async def _fenced(self, sid: str, what: str, kv: KeyValue, change: _Change) -> None:
        """A compare-and-set change, once the server confirmed that this worker still holds `sid`'s partition."""
        if not await self._still_owned(sid):  # the partition moved on: the message must reach its new owner
            raise PartitionMoved(f"{what}: its partition moved to another worker")
        await self._values.change(kv, self._buffer_key(sid), sid, change, what)

    async def intend(self, sid: str, ids: Sequence[str], unparked: dict[str, dict[str, Any]]) -> None:
        """Before a turn answers the messages `ids` (in this batch), write the batch down beside the parked
        messages (parking the `unparked` ones too), so whoever redoes it after a crash forms the same batch and
        its replies carry the same ids (which the streams then do not deliver twice)."""
        buffers = self.bus.buffers
        assert buffers is not None
        for message_id in ids:
            self._parked[message_id] = sid
        answered = self._answered.pop(sid, set())  # earlier turns' messages leave with this write

        def change(value: dict[str, Any] | None) -> dict[str, Any] | None:
            value = value or {"messages": [], "turns": []}
            kept = [e for e in value["messages"] if e["id"] not in answered]
            have = {e["id"] for e in kept}
            added = [{"id": i, "data": d} for i, d in unparked.items() if i not in have]
            left = have | unparked.keys()
            turns = [t for t in value.get("turns", []) if left.intersection(t)]
            if list(ids) in turns and not added and len(kept) == len(value["messages"]):
                return value
            return {"messages": [*kept, *added], "turns": turns if list(ids) in turns else [*turns, list(ids)]}

        what = f"beginning a turn of {sid}"
        try:
            await self.patiently(sid, what, lambda: self._fenced(sid, what, buffers, change))
        except BaseException:
            self._answered.setdefault(sid, set()).update(answered)  # for `tidy`
            raise

    async def unpark(self, sid: str, ids: Sequence[str]) -> None:
        """Take answered messages out of the session's parked buffer."""
        assert self.bus.buffers is not None
        gone = set(ids)

        def change(value: dict[str, Any] | None) -> dict[str, Any] | None:
            if value is None:
                return None
            kept = [e for e in value["messages"] if e["id"] not in gone]
            if len(kept) == len(value["messages"]):
                return value
            left = {e["id"] for e in kept}
            turns = [t for t in value.get("turns", []) if left.intersection(t)]
            return {"messages": kept, "turns": turns} if kept else None

        try:
            await self._values.change(
                self.bus.buffers, self._buffer_key(sid), sid, change, f"unbuffering messages of {sid}"
            )
        except (HistoryError, *NATS_ERRORS) as exc:  # they stay parked; a later owner skips them (they are done)
            logger.warning("cluster: answered messages of %s stay in the buffers bucket: %s", sid, exc)

    async def parked(self, partition: int) -> dict[str, tuple[list[list[str]], dict[str, dict[str, Any]]]]:
        """What `partition`'s last owner left unanswered, per session: the batches it had begun (lists of ids, in
        order) and the messages (id -> data, oldest first), answered ones left out."""
        assert self.bus.buffers is not None
        found: dict[str, tuple[list[list[str]], dict[str, dict[str, Any]]]] = {}
        prefix = f"{partition}."
        for entry in await self.bus.entries("buffers", f"{partition}.*"):
            sid = decode_key(entry.key[len(prefix) :])
            left = await self._left(sid, json.loads(entry.value) if entry.value else None)
            if left is not None:
                found[sid] = left
        return found

    async def has_parked(self, sid: str) -> bool:
        """Whether anything of `sid` is in the buffers bucket (answered messages not yet tidied away included).
        Read from memory, as `seen` left it, while this worker owns `sid`."""
        assert self.bus.buffers is not None
        try:
            value, _ = await self._values.read(self.bus.buffers, self._buffer_key(sid), sid)
        except NATS_ERRORS:  # not known: as if something were
            return True
        return bool(value and (value["messages"] or value.get("turns")))

    async def parked_of(self, sid: str) -> tuple[list[list[str]], dict[str, dict[str, Any]]] | None:
        """`parked` for one session (None when it has nothing parked)."""
        assert self.bus.buffers is not None
        value, _ = await self._values.read(self.bus.buffers, self._buffer_key(sid), sid)
        return await self._left(sid, value)

    async def _left(
        self, sid: str, value: dict[str, Any] | None
    ) -> tuple[list[list[str]], dict[str, dict[str, Any]]] | None:
        if not value:
            return None
        answered = await self._answered_ids(sid)
        messages = {e["id"]: e["data"] for e in value["messages"] if e["id"] not in answered}
        turns = [[i for i in t if i in messages] for t in value.get("turns", [])]
        for message_id in messages:
            self._parked[message_id] = sid
        if len(messages) < len(value["messages"]):
            await self.unpark(sid, [e["id"] for e in value["messages"] if e["id"] in answered])
        return ([t for t in turns if t], messages) if messages else None

    def forget(self, partition: int) -> None:
        """Ownership of `partition` changed: read its sessions' values from the server again (see `_OwnedValues`)."""
        self._values.forget(partition)

    def forget_parked(self, sids: set[str]) -> None:
        """This worker no longer owns these sessions: their parked messages are the next owner's to answer."""
        for message_id in [i for i, s in self._parked.items() if s in sids]:
            del self._parked[message_id]
        for sid in sids:
            self._answered.pop(sid, None)


class ClusterPluginStore:
    """A plugin's `self.store` on a worker: JSON values in the cluster's `stores` bucket, the same for every
    worker (keys are prefixed with the plugin's id). Every method returns a `Result`, like `PluginStore`."""

    def __init__(self, bus: Bus, plugin_id: str) -> None:
        self.bus = bus
        self.plugin_id = plugin_id
        self._prefix = encode_key(plugin_id) + "."

    async def _call(self, job: Callable[[KeyValue], Awaitable[Any]]) -> Result[Any, SdkError]:
        if self.bus.stores is None:
            return Err(
                SdkError(f"store of plugin {self.plugin_id!r}: the cluster is not connected", code="storage_closed")
            )
        try:
            return Ok(await job(self.bus.stores))
        except NATS_ERRORS as exc:
            return Err(SdkError(f"store of plugin {self.plugin_id!r} failed: {exc}", code="storage_error"))

    @staticmethod
    def _bad_key(key: object) -> Err[SdkError] | None:
        if not isinstance(key, str) or not key:
            return Err(SdkError(f"store keys are non-empty strings, not {key!r}", code="invalid_argument"))
        return None

    async def get(self, key: str, default: Any = None) -> Result[Any, SdkError]:
        """`Ok(value)` for `key`, or `Ok(default)` when it is not set."""
        if (bad := self._bad_key(key)) is not None:
            return bad

        async def job(kv: KeyValue) -> Any:
            value, _ = await _read(kv, self._prefix + encode_key(key))
            return default if value is None else value["v"]

        return await self._call(job)

    async def set(self, key: str, value: Any) -> Result[None, SdkError]:
        """Store `value` under `key`; `Ok(None)` once the server holds it."""
        if (bad := self._bad_key(key)) is not None:
            return bad
        try:
            data = json.dumps({"v": value}, ensure_ascii=False).encode()
        except (TypeError, ValueError) as exc:
            return Err(
                SdkError(f"the value for store key {key!r} is not JSON-serialisable: {exc}", code="invalid_argument")
            )

        async def job(kv: KeyValue) -> None:
            await kv.put(self._prefix + encode_key(key), data)

        return await self._call(job)

    async def delete(self, key: str) -> Result[bool, SdkError]:
        """Remove `key`; `Ok(True)` when it was set."""
        if (bad := self._bad_key(key)) is not None:
            return bad

        async def job(kv: KeyValue) -> bool:
            value, _ = await _read(kv, self._prefix + encode_key(key))
            if value is None:
                return False
            await kv.delete(self._prefix + encode_key(key))
            return True

        return await self._call(job)

    async def exists(self, key: str) -> Result[bool, SdkError]:
        """`Ok(True)` when `key` is set."""
        missing = object()
        result = await self.get(key, missing)
        return Ok(result.value is not missing) if isinstance(result, Ok) else result

    async def keys(self, prefix: str = "") -> Result[list[str], SdkError]:
        """`Ok` of the plugin's keys starting with `prefix`, sorted."""

        async def job(kv: KeyValue) -> list[str]:
            found = await self.bus.entries("stores", self._prefix + "*")
            return sorted(k for k in (decode_key(e.key[len(self._prefix) :]) for e in found) if k.startswith(prefix))

        return await self._call(job)

    async def clear(self) -> Result[int, SdkError]:
        """Remove every key of the plugin; `Ok` of how many there were."""
        listed = await self.keys()
        if not isinstance(listed, Ok):
            return listed

        async def job(kv: KeyValue) -> int:
            for key in listed.value:
                await kv.delete(self._prefix + encode_key(key))
            return len(listed.value)

        return await self._call(job)

    async def close(self) -> None:
        """Nothing to close: the bus owns the connection."""
