"""The cluster's shared state on a real NATS server: a session's parked buffer, emptied and parked into again (the
bucket then holds a deletion marker), and a turn stored once even when a redelivery stores it again."""

from __future__ import annotations

import json

import pytest

from core.chat import KiraIMMessage, KiraMessageBatchEvent, KiraMessageEvent, MessageChain, Session, User
from core.chat.message_elements import Text
from core.cluster import Bus, ClusterHistory, _state
from core.cluster._held import HeldMessages
from core.cluster._state import _Done, _encode_history, _read, _Turn, _write
from core.cluster._turns import TurnLedger
from core.config import ClusterConfig
from core.provider import ChatMessage

pytestmark = [pytest.mark.anyio]


async def _done(ids) -> None:
    pass


@pytest.fixture
async def history(nats_server):
    bus = Bus(ClusterConfig(url=nats_server.url, partitions=4), "test")
    await bus.connect()
    try:
        yield ClusterHistory(bus, max_turns=None, max_tokens=None, done=_done)
    finally:
        await bus.close()


async def test_a_buffer_emptied_by_a_turn_takes_the_next_parked_message(history):
    await history.park("s", "m1", {"n": 1})
    await history.append_turn("s", [ChatMessage("user", "1")], done=["m1"])  # m1 answered, left parked for now
    assert await history.parked_of("s") is None  # answered: not parked, and taken out (the key is deleted)
    await history.park("s", "m2", {"n": 2})  # a conditional update on the deletion marker
    assert await history.parked_of("s") == ([], {"m2": {"n": 2}})
    assert await history.seen("s", "m1") and await history.seen("s", "m2")
    assert not await history.seen("s", "m3")


async def test_a_turn_whose_meta_is_not_json_is_refused_and_nothing_is_stored(history):
    await history.append_turn("s", [ChatMessage("user", "1")], done=["m1"])
    with pytest.raises(TypeError):
        await history.append_turn("s", [ChatMessage("user", "2")], meta={"when": object()}, done=["m2"])
    assert not await history.is_done("s", "m2")
    assert await history.append_turn("s", [ChatMessage("user", "3")], done=["m3"]) == 2  # the value was not moved
    assert [t.messages[0].content for t in await history.list_turns("s")] == ["1", "3"]


async def test_a_turn_stored_again_by_a_redelivery_is_stored_once(history):
    first = await history.append_turn("s", [ChatMessage("user", "hi")], done=["m1"])
    again = await history.append_turn("s", [ChatMessage("user", "hi")], done=["m1"])
    assert first == 1 and again == 0  # 0: nothing stored
    assert [t.messages[0].content for t in await history.list_turns("s")] == ["hi"]
    assert await history.is_done("s", "m1")


async def test_a_deletion_that_lost_its_compare_and_set_is_retried_not_raised(history):
    # Two workers' writes to one key: the loser's delete must come back as "moved" (None) so the change is made
    # again on the value read anew; JetStream reports it as a plain bad request, which once left answered messages
    # in the bucket.
    kv = history.bus.buffers
    assert await _write(history.bus, kv, "k", {"v": 1}, 0)
    _, revision = await _read(kv, "k")
    assert await _write(history.bus, kv, "k", {"v": 2}, revision)  # the other writer
    assert await _write(history.bus, kv, "k", None, revision) is None
    assert (await _read(kv, "k"))[0] == {"v": 2}


async def test_a_worker_that_remembers_a_value_still_sees_another_workers_write(history, nats_server):
    # A worker keeps the values of the sessions it owns in memory; a stalled worker that still believes it owns
    # the session writes meanwhile. The first worker's next write finds the revision moved and is made on the
    # newer value: no turn is lost.
    other_bus = Bus(ClusterConfig(url=nats_server.url, partitions=4), "stalled")
    await other_bus.connect()
    try:
        other = ClusterHistory(other_bus, max_turns=None, max_tokens=None, done=_done)
        await history.append_turn("s", [ChatMessage("user", "1")], done=["m1"])
        await other.append_turn("s", [ChatMessage("user", "2")], done=["m2"])
        await history.append_turn("s", [ChatMessage("user", "3")], done=["m3"])
    finally:
        await other_bus.close()
    assert [t.messages[0].content for t in await history.list_turns("s")] == ["1", "2", "3"]


async def test_answered_messages_leave_the_parked_buffer_with_the_sessions_next_batch_or_at_tidy(history):
    # A stored turn leaves its messages in the buffers bucket (its history says they are answered) and saves a
    # write: the session's next batch takes them out, and `tidy` (each lease, on a worker) the rest.
    buffers, key = history.bus.buffers, history._buffer_key("s")
    await history.intend("s", ["m1"], {"m1": {"n": 1}})
    await history.append_turn("s", [ChatMessage("user", "1")], done=["m1"])
    await history.intend("s", ["m2"], {"m2": {"n": 2}})
    value, _ = await _read(buffers, key)
    assert value == {"messages": [{"id": "m2", "data": {"n": 2}}], "turns": [["m2"]]}
    await history.append_turn("s", [ChatMessage("user", "2")], done=["m2"])
    assert await history.seen("s", "m2") and await history.parked_of("s") is None
    await history.intend("s", ["m3"], {"m3": {"n": 3}})
    await history.append_turn("s", [ChatMessage("user", "3")], done=["m3"])
    await history.tidy()
    assert (await _read(buffers, key))[0] is None


class HeldMsg:
    subject = "hookchat.in.0"


def batch_of(*ids: str) -> KiraMessageBatchEvent:
    events = []
    for message_id in ids:
        event = KiraMessageEvent(
            KiraIMMessage(MessageChain([Text(message_id)]), User("u1"), Session("test", "dm", "u1"))
        )
        event.inbox_id = message_id
        events.append(event)
    return KiraMessageBatchEvent(events, events[-1].session)


async def test_only_a_message_the_hooks_sent_on_at_once_skips_the_write_down_of_its_batch(history):
    # Sent on as it arrived: delivered again after a crash, it forms the same batch by itself. A message flushed
    # from the buffer alone may have its park still in flight: once parked and acknowledged, a crash would answer
    # it again in another batch, so its batch is written down.
    held = HeldMessages(30.0, lambda subject: 0)
    ledger = TurnLedger(history, held)
    sid = batch_of("x").sid
    held.hold("m1", HeldMsg(), {"n": 1})  # type: ignore[arg-type] - only its subject is read
    held.sent_on("m1")
    assert await ledger.begin(batch_of("m1"))
    assert await history.parked_of(sid) is None
    held.hold("m2", HeldMsg(), {"n": 2})  # type: ignore[arg-type] - as above
    assert await ledger.begin(batch_of("m2"))
    assert await history.parked_of(sid) == ([["m2"]], {"m2": {"n": 2}})
    held.hold("m3", HeldMsg(), {"n": 3})  # type: ignore[arg-type] - as above
    held.sent_on("m3")
    assert await ledger.begin(batch_of("m3"))  # sent on at once, but something of its session is parked
    assert (await history.parked_of(sid))[0] == [["m2"], ["m3"]]  # type: ignore[index] - parked, as just seen


async def test_a_history_value_with_its_turns_encoded_once_reads_back_the_same():
    read = {"next": 3, "turns": [{"id": 1, "messages": [{"role": "user", "content": "é"}]}], "done": ["m1"]}
    stored = {**read, "turns": [*read["turns"], _Turn(id=2, messages=[{"role": "user", "content": "2"}])]}
    assert json.loads(_encode_history(stored)) == json.loads(json.dumps(stored))
    assert json.loads(_encode_history({"turns": []})) == {"turns": []}


async def test_answered_ids_read_back_as_written_whether_in_the_head_or_sealed(history, monkeypatch):
    monkeypatch.setattr(_state, "_HEAD_IDS", 3)
    done = _Done(["m1", "m2"]).plus(["m3"]).plus(["m2"])  # answered again
    assert list(done) == ["m1", "m2", "m3", "m2"] and "m2" in done and "m4" not in done
    assert json.loads(_encode_history({"next": 6, "turns": [], "done": done})) == {
        "next": 6,
        "turns": [],
        "done": ["m1", "m2", "m3", "m2"],
    }
    for n in range(1, 8):
        await history.append_turn("s", [ChatMessage("user", f"{n}")], done=[f"m{n}"])
    reader = ClusterHistory(history.bus, max_turns=None, max_tokens=None, done=_done)  # reads it from the server
    assert [await reader.is_done("s", f"m{n}") for n in range(1, 9)] == [True] * 7 + [False]
    value, _ = await _read(history.bus.history, "cw")  # type: ignore[arg-type] - the bus is connected
    assert value is not None and value["done"] == ["m7"] and len(value["sealed"]) == 2  # m1-m3, m4-m6


def _turn(n: int) -> list[ChatMessage]:
    return [ChatMessage("user", f"question {n} " + "q" * 140), ChatMessage("assistant", f"answer {n} " + "a" * 140)]


@pytest.fixture
async def long_history(nats_server):
    bus = Bus(ClusterConfig(url=nats_server.url, partitions=4, history_turns=200), "test")
    await bus.connect()
    try:
        yield ClusterHistory(bus, max_turns=None, max_tokens=None, done=_done)
    finally:
        await bus.close()


def _history_writes(history: ClusterHistory, monkeypatch) -> list[int]:
    """The size of every write to the history bucket from now on (payload and subject)."""
    sizes: list[int] = []
    publisher = history.bus.publisher
    publish, prefix = publisher.publish, history.bus.history._pre  # type: ignore[union-attr] - connected

    async def counted(subject, payload, headers=None, timeout=None):
        if subject.startswith(prefix):
            sizes.append(len(subject) + len(payload))
        return await publish(subject, payload, headers, timeout)

    monkeypatch.setattr(publisher, "publish", counted)
    return sizes


async def _keys(history: ClusterHistory) -> list[str]:
    return [e.key for e in await history.bus.entries("history")]


async def test_a_long_sessions_every_write_stays_bounded_and_its_turns_read_back_in_order(long_history, monkeypatch):
    sizes = _history_writes(long_history, monkeypatch)
    one_turn = len(_state.to_json({"messages": [m.to_dict() for m in _turn(0)]}))
    for n in range(1, 1_101):
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
    # A head holds less than _HEAD_BYTES of older turns, the new one and under _HEAD_IDS ids; a chunk as much.
    bound = _state._HEAD_BYTES + 2 * one_turn + _state._HEAD_IDS * 30 + 1_000
    assert len(sizes) > 1_100 and max(sizes) < bound, (max(sizes), bound)
    for reader in (long_history, ClusterHistory(long_history.bus, max_turns=None, max_tokens=None, done=_done)):
        turns = await reader.list_turns("s")
        assert [t.id for t in turns] == list(range(901, 1_101))  # the newest history_turns, in order
        assert [t.messages[0].content for t in turns[:1]] == [_turn(901)[0].content]
        assert [t.id for t in await reader.list_turns("s", 3)] == [1_098, 1_099, 1_100]
        history = await reader.get_history("s")
        assert len(history) == 400 and history[-1].content == _turn(1_100)[1].content
        assert await reader.is_done("s", "m100") and await reader.is_done("s", "m1100")  # 1,000 turns ago
        assert not await reader.is_done("s", "m1101")
        assert await reader.seen("s", "m100")
    # The same turn redelivered (its id answered 1,000 turns ago) is not stored again.
    assert await long_history.append_turn("s", _turn(100), done=["m100"]) == 0
    # Storage stays bounded: chunks past history_turns turns and _DONE_KEPT ids are removed.
    keys = await _keys(long_history)
    assert sum(".t." in k for k in keys) <= 200 * one_turn // _state._HEAD_BYTES + 2
    assert sum(".d." in k for k in keys) <= _state._DONE_KEPT // _state._HEAD_IDS + 1
    assert await long_history.sessions() == ["s"]


class Crash(BaseException):
    """The worker dies."""


async def test_a_crash_between_a_chunks_write_and_its_heads_loses_and_duplicates_nothing(long_history, monkeypatch):
    for n in range(1, 40):
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
    keys_before = await _keys(long_history)
    put = long_history.bus.put
    write = _state._write

    async def put_then_die(kv, key, value):
        await put(kv, key, value)
        monkeypatch.setattr(_state, "_write", dying_write)

    async def dying_write(*args, **kwargs):
        monkeypatch.setattr(_state, "_write", write)
        raise Crash

    monkeypatch.setattr(long_history.bus, "put", put_then_die)
    stored = 40
    with pytest.raises(Crash):  # the turn that seals the head's turns: its chunk is stored, its head is not
        while stored < 100:
            await long_history.append_turn("s", _turn(stored), done=[f"m{stored}"])
            stored += 1
    orphans = set(await _keys(long_history)) - set(keys_before)
    assert len(orphans) == 1 and ".t." in orphans.pop()
    monkeypatch.setattr(long_history.bus, "put", put)
    # The next owner (nothing in memory) is given the same message again, and then the session's next ones.
    owner = ClusterHistory(long_history.bus, max_turns=None, max_tokens=None, done=_done)
    assert not await owner.is_done("s", f"m{stored}")
    for n in range(stored, stored + 60):
        await owner.append_turn("s", _turn(n), done=[f"m{n}"])
        assert await owner.append_turn("s", _turn(n), done=[f"m{n}"]) == 0  # and a copy of each
    turns = await owner.list_turns("s")
    assert [t.messages[0].content for t in turns] == [_turn(n)[0].content for n in range(1, stored + 60)]
    value, _ = await _read(long_history.bus.history, "cw")  # type: ignore[arg-type] - the bus is connected
    assert value is not None
    named = {f"cw.t.{d}" for d, _ in value["chunks"]} | {f"cw.d.{d}" for d, _ in value.get("sealed", ())}
    assert set(await _keys(long_history)) == named | {"cw"}  # the chunk written before the crash is one of them


async def test_two_workers_sealing_the_same_head_store_each_turn_once(long_history, nats_server):
    # A stalled worker still holds the session's head in memory and writes at the moment the owner's write seals
    # it: both seal the same turns under the same name; the stalled one's head write loses, and its turn is
    # stored after the owner's on the head read again.
    other_bus = Bus(ClusterConfig(url=nats_server.url, partitions=4, history_turns=200), "stalled")
    await other_bus.connect()
    try:
        stalled = ClusterHistory(other_bus, max_turns=None, max_tokens=None, done=_done)
        n = 1
        while True:  # up to the turn whose write seals the head
            await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
            n += 1
            value, _ = await _read(long_history.bus.history, "cw")  # type: ignore[arg-type] - connected
            assert value is not None
            if value["size"] >= _state._HEAD_BYTES:
                break
        await stalled.is_done("s", "m1")  # it reads (and keeps) the head now
        put, sealed_by_stalled = other_bus.put, []

        async def recorded_put(kv, key, data):
            sealed_by_stalled.append(key)
            return await put(kv, key, data)

        other_bus.put = recorded_put  # type: ignore[method-assign] - records what the stalled worker seals
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
        await stalled.append_turn("s", _turn(n + 1), done=[f"m{n + 1}"])
        await long_history.append_turn("s", _turn(n + 2), done=[f"m{n + 2}"])
    finally:
        await other_bus.close()
    turns = await long_history.list_turns("s")
    assert [t.messages[0].content for t in turns] == [_turn(i)[0].content for i in range(1, n + 3)]
    value, _ = await _read(long_history.bus.history, "cw")  # type: ignore[arg-type] - the bus is connected
    assert value is not None and [t["id"] for t in value["turns"]][-2:] == [n + 1, n + 2]
    assert set(await _keys(long_history)) == {"cw", *(f"cw.t.{d}" for d, _ in value["chunks"])}
    assert sealed_by_stalled and set(sealed_by_stalled) <= {f"cw.t.{d}" for d, _ in value["chunks"]}


async def test_a_value_of_the_single_value_layout_is_read_and_then_sealed(long_history, monkeypatch):
    # A session stored by the release before chunks: its newest 200 turns and 4,096 answered ids in one value.
    old = {
        "next": 4_097,
        "turns": [
            {"id": n, "at": 1.0, "tokens": 10, "meta": {}, "messages": [m.to_dict() for m in _turn(n)]}
            for n in range(3_897, 4_097)
        ],
        "done": [f"m{n}" for n in range(1, 4_097)],
    }
    await long_history.bus.history.put("cw", json.dumps(old).encode())  # type: ignore[union-attr] - connected
    reader = ClusterHistory(long_history.bus, max_turns=None, max_tokens=None, done=_done)
    assert [t.id for t in await reader.list_turns("s")] == list(range(3_897, 4_097))
    assert await reader.is_done("s", "m1") and not await reader.is_done("s", "m4097")
    sizes = _history_writes(long_history, monkeypatch)
    for n in range(4_097, 4_100):
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
    assert sizes[-1] < 4 * len(_state.to_json(old["turns"][0]))  # sealed once, then small
    for history in (long_history, ClusterHistory(long_history.bus, max_turns=None, max_tokens=None, done=_done)):
        assert [t.id for t in await history.list_turns("s")] == list(range(3_900, 4_100))
        assert await history.is_done("s", "m4") and await history.is_done("s", "m4099")


async def test_clearing_a_long_session_removes_its_turns_and_chunks_and_keeps_its_answered_ids(long_history):
    for n in range(1, 80):
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
    assert await long_history.clear("s") == 79
    assert await long_history.list_turns("s") == [] and await long_history.get_history("s") == []
    assert await long_history.is_done("s", "m1")
    assert [k for k in await _keys(long_history) if ".t." in k] == []
    for n in range(80, 120):  # the cleared session seals its new turns as before
        await long_history.append_turn("s", _turn(n), done=[f"m{n}"])
    assert [t.id for t in await long_history.list_turns("s")] == list(range(80, 120))
    assert await long_history.is_done("s", "m1") and await long_history.is_done("s", "m119")
    one_turn = len(_state.to_json({"messages": [m.to_dict() for m in _turn(0)]}))
    assert sum(".t." in k for k in await _keys(long_history)) <= 40 * one_turn // _state._HEAD_BYTES + 1


async def test_the_history_a_turn_reads_is_a_copy_it_may_edit(history):
    # Stored turns keep their messages decoded; each read must still get objects of its own.
    await history.append_turn("s", [ChatMessage("user", "1")], done=["m1"])
    first = await history.get_history("s")
    first[0].content = "edited"
    assert [m.content for m in await history.get_history("s")] == ["1"]
