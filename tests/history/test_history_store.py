"""The history store: turns in and out in order, bounds, the editing API, many sessions, concurrency, durability."""

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
from contextlib import closing
from pathlib import Path

import pytest

from core.history import HistoryError, HistoryStore, Turn, TurnNotFoundError, estimate_tokens
from core.provider.llm import ChatMessage, ToolCall

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


def exchange(question: str, answer: str) -> list[ChatMessage]:
    return [ChatMessage("user", question), ChatMessage("assistant", answer)]


def contents(messages: list[ChatMessage]) -> list[str]:
    return [m.content for m in messages]


async def test_turns_come_back_in_order_with_tool_calls_intact(store):
    call = ToolCall("weather", {"city": "Paris"})
    tool_turn = [
        ChatMessage("user", "weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=[call]),
        ChatMessage("tool", "sunny", tool_call_id=call.id),
        ChatMessage("assistant", "<msg><text>Sunny.</text></msg>"),
    ]
    first = await store.append_turn("console:dm:alice", exchange("hi", "hello"))
    second = await store.append_turn("console:dm:alice", tool_turn, meta={"model": "m1"})
    assert second > first

    history = await store.get_history("console:dm:alice")
    assert contents(history) == ["hi", "hello", "weather in Paris?", "", "sunny", "<msg><text>Sunny.</text></msg>"]
    assert history[3].tool_calls == [call]
    assert history[4].role == "tool" and history[4].tool_call_id == call.id

    turn = await store.get_turn(second)
    assert turn == Turn(second, "console:dm:alice", turn.created_at, tool_turn, {"model": "m1"})


async def test_history_is_bounded_by_turns(tmp_path):
    async with HistoryStore(tmp_path / "h.db", max_turns=3) as store:
        for i in range(10):
            await store.append_turn("s:dm:1", exchange(f"q{i}", f"a{i}"))
        assert contents(await store.get_history("s:dm:1")) == ["q7", "a7", "q8", "a8", "q9", "a9"]
        assert contents(await store.get_history("s:dm:1", max_turns=1)) == ["q9", "a9"]
        assert await store.get_history("s:dm:1", max_turns=0) == []
        assert len(await store.get_history("s:dm:1", max_turns=100)) == 20


async def test_history_is_bounded_by_estimated_tokens_in_whole_turns(tmp_path):
    turn = exchange("x" * 40, "y" * 40)  # 2 messages of (4 + 10) tokens
    assert estimate_tokens(turn) == 28
    async with HistoryStore(tmp_path / "h.db", max_turns=None, max_tokens=60) as store:
        for _ in range(5):
            await store.append_turn("s:dm:1", turn)
        assert len(await store.get_history("s:dm:1")) == 4  # 2 turns = 56 tokens; a third would be 84
        assert len(await store.get_history("s:dm:1", max_tokens=28)) == 2
        assert await store.get_history("s:dm:1", max_tokens=27) == []  # a turn is never cut in half
        assert len(await store.get_history("s:dm:1", max_tokens=1000)) == 10
        assert len(await store.get_history("s:dm:1", max_tokens=1000, max_turns=2)) == 4


async def test_estimate_counts_tool_calls():
    call = ToolCall("search", {"q": "x"}, raw_arguments='{"q": "x"}')  # 6 + 10 chars
    assert estimate_tokens([ChatMessage("assistant", "", tool_calls=[call])]) == 4 + 4


async def test_editing_api(store):
    ids = [await store.append_turn("s:dm:1", exchange(f"q{i}", f"a{i}")) for i in range(4)]
    other = await store.append_turn("s:gm:2", exchange("g", "h"))

    turns = await store.list_turns("s:dm:1")
    assert [t.id for t in turns] == ids
    assert [t.id for t in await store.list_turns("s:dm:1", limit=2)] == ids[2:]
    assert turns[0].sid == "s:dm:1" and turns[0].meta == {} and turns[0].created_at > 0

    await store.replace_turn(ids[1], [ChatMessage("user", "[redacted]")], meta={"edited": True})
    edited = await store.get_turn(ids[1])
    assert contents(edited.messages) == ["[redacted]"] and edited.meta == {"edited": True}
    assert edited.created_at == turns[1].created_at
    await store.replace_turn(ids[1], [ChatMessage("user", "again")])
    assert (await store.get_turn(ids[1])).meta == {"edited": True}  # meta left as it was

    assert await store.delete_turn(ids[0]) is True
    assert await store.delete_turn(ids[0]) is False
    assert await store.get_turn(ids[0]) is None
    with pytest.raises(TurnNotFoundError):
        await store.replace_turn(ids[0], exchange("x", "y"))

    assert contents(await store.get_history("s:dm:1")) == ["again", "q2", "a2", "q3", "a3"]
    assert await store.sessions() == ["s:dm:1", "s:gm:2"]
    assert await store.clear("s:dm:1") == 3
    assert await store.sessions() == ["s:gm:2"]
    assert [t.id for t in await store.list_turns("s:gm:2")] == [other]


async def test_ids_are_never_reused(store):
    first = await store.append_turn("s:dm:1", exchange("a", "b"))
    await store.delete_turn(first)
    assert await store.append_turn("s:dm:1", exchange("c", "d")) > first


async def test_many_sessions_interleaved(store):
    for i in range(20):
        for s in range(50):
            await store.append_turn(f"s:dm:{s}", exchange(f"{s}/{i}", "ok"))
    for s in range(50):
        history = await store.get_history(f"s:dm:{s}", max_turns=100)
        assert contents(history)[::2] == [f"{s}/{i}" for i in range(20)]
    assert len(await store.sessions()) == 50


async def test_concurrent_appends_from_many_tasks(store):
    async def chat(s: int) -> list[int]:
        ids = []
        for i in range(10):
            await store.get_history(f"s:dm:{s}")
            ids.append(await store.append_turn(f"s:dm:{s}", exchange(f"{s}/{i}", "ok")))
            ids.append(await store.append_turn("s:gm:shared", exchange(f"{s}/{i}", "ok")))
        return ids

    results = await asyncio.gather(*(chat(s) for s in range(200)))
    all_ids = [i for ids in results for i in ids]
    assert len(set(all_ids)) == 4000
    assert all(ids == sorted(ids) for ids in results)  # each task's turns in the order it appended them
    for s in (0, 99, 199):
        assert contents(await store.get_history(f"s:dm:{s}"))[::2] == [f"{s}/{i}" for i in range(10)]
    assert len(await store.list_turns("s:gm:shared")) == 2000


async def test_a_failing_call_fails_only_its_caller(store):
    results = await asyncio.gather(
        store.append_turn("s:dm:1", exchange("a", "b")),
        store.replace_turn(10**9, exchange("x", "y")),
        store.append_turn("s:dm:1", exchange("c", "d")),
        return_exceptions=True,
    )
    assert isinstance(results[1], TurnNotFoundError)
    assert contents(await store.get_history("s:dm:1")) == ["a", "b", "c", "d"]


async def test_bad_input_is_rejected_before_anything_is_stored(store):
    with pytest.raises(TypeError):
        await store.append_turn("s:dm:1", [{"role": "user", "content": "hi"}])
    with pytest.raises(TypeError):
        await store.append_turn("s:dm:1", exchange("a", "b"), meta={"when": object()})
    with pytest.raises(ValueError):
        await store.get_history("s:dm:1", max_turns=-1)
    assert await store.sessions() == []


async def test_database_work_runs_on_one_thread_off_the_loop(tmp_path, monkeypatch):
    statement_threads: set[int] = set()
    connect = sqlite3.connect

    def traced_connect(*args, **kwargs):
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(lambda _sql: statement_threads.add(threading.get_ident()))
        return conn

    monkeypatch.setattr(sqlite3, "connect", traced_connect)
    async with HistoryStore(tmp_path / "h.db") as store:
        turn_id = await store.append_turn("s:dm:1", exchange("a", "b"))
        await store.get_history("s:dm:1")
        await store.list_turns("s:dm:1")
        await store.replace_turn(turn_id, exchange("c", "d"))
        await store.get_turn(turn_id)
        await store.sessions()
        await store.delete_turn(turn_id)
        await store.clear("s:dm:1")
    assert len(statement_threads) == 1
    assert threading.get_ident() not in statement_threads


async def test_reopen_keeps_history_in_wal_mode(tmp_path):
    path = tmp_path / "nested" / "h.db"
    async with HistoryStore(path) as store:
        await store.append_turn("s:dm:1", exchange("a", "b"))
    async with HistoryStore(path) as store:
        assert contents(await store.get_history("s:dm:1")) == ["a", "b"]
    with closing(sqlite3.connect(path)) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


async def test_reading_the_newest_turns_uses_the_index(tmp_path):
    """Why append and read cost stay flat as history grows: no scan, no sort (bench/history.py measures it)."""
    async with HistoryStore(tmp_path / "h.db"):
        pass
    with closing(sqlite3.connect(tmp_path / "h.db")) as conn:
        plan = " ".join(
            row[-1]
            for row in conn.execute(
                "EXPLAIN QUERY PLAN SELECT tokens, messages FROM turns WHERE sid = ? ORDER BY id DESC LIMIT ?",
                ("s:dm:1", 50),
            )
        )
    assert "USING INDEX turns_sid_id (sid=?)" in plan and "TEMP B-TREE" not in plan


async def test_retention_trims_old_turns_of_the_appending_session(tmp_path):
    path = tmp_path / "h.db"
    async with HistoryStore(path, retain_turns=5) as store:
        await store.append_turn("s:dm:quiet", exchange("keep", "me"))
        ids = []
        for i in range(200):
            ids.append(await store.append_turn("s:dm:1", exchange(f"q{i}", "a")))
            await store.append_turn(f"s:dm:other{i % 7}", exchange("x", "y"))
            kept = [t.id for t in await store.list_turns("s:dm:1")]
            assert len(kept) <= 5 + 63 and kept == ids[-len(kept) :]
        assert len(await store.list_turns("s:dm:quiet")) == 1
    async with HistoryStore(path, retain_turns=5) as store:  # after a restart: trimmed on the next append
        ids.append(await store.append_turn("s:dm:1", exchange("again", "a")))
        assert [t.id for t in await store.list_turns("s:dm:1")] == ids[-5:]


async def test_store_must_be_open(tmp_path):
    store = HistoryStore(tmp_path / "h.db")
    with pytest.raises(HistoryError, match="not open"):
        await store.append_turn("s:dm:1", exchange("a", "b"))
    async with store:
        pass
    with pytest.raises(HistoryError, match="not open"):
        await store.get_history("s:dm:1")
    await store.close()  # closing twice is harmless


async def test_a_file_that_is_not_a_database_fails_to_open(tmp_path):
    path = tmp_path / "h.db"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(HistoryError, match="cannot open history database"):
        await HistoryStore(path).open()


async def test_a_cancelled_caller_leaves_the_store_working(store):
    task = asyncio.ensure_future(store.append_turn("s:dm:1", exchange("a", "b")))
    await asyncio.sleep(0)
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    await store.append_turn("s:dm:1", exchange("c", "d"))
    assert contents(await store.get_history("s:dm:1"))[-2:] == ["c", "d"]


def test_every_returned_append_survives_kill_9(tmp_path):
    """A child appends as fast as it can and prints each id after append_turn returned; SIGKILL it mid-stream."""
    db = tmp_path / "h.db"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    child = subprocess.Popen(
        [sys.executable, str(REPO / "tests/history/appender.py"), str(db)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    printed: list[int] = []
    try:
        while len(printed) < 2000:
            line = child.stdout.readline()
            if not line:
                pytest.fail(f"appender exited early: {child.wait()} {child.stderr.read()}")
            printed.append(int(line))
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    rest = child.stdout.read()  # lines already in the pipe were printed after their append returned, too
    printed += [int(line) for line in rest.split("\n")[:-1]]  # a last line without "\n" is incomplete
    child.stdout.close()
    child.stderr.close()

    with closing(sqlite3.connect(db)) as conn:
        stored = {row[0] for row in conn.execute("SELECT id FROM turns")}
    assert child.returncode == -signal.SIGKILL
    assert set(printed) <= stored


async def test_history_read_again_is_fresh_objects_and_follows_edits(store):
    # The store keeps decoded turns to avoid parsing a session's history at every turn: what a caller does to the
    # messages it got must not reach the next reader, and an edited turn is read as edited.
    turn_id = await store.append_turn("s", [ChatMessage("user", "hi"), ChatMessage("assistant", "hello")])
    first = await store.get_history("s")
    first[1].content = "scribbled on by a plugin"
    first.pop(0)
    assert [m.content for m in await store.get_history("s")] == ["hi", "hello"]
    await store.replace_turn(turn_id, [ChatMessage("user", "hi"), ChatMessage("assistant", "edited")])
    assert [m.content for m in await store.get_history("s")] == ["hi", "edited"]
    await store.delete_turn(turn_id)
    assert await store.get_history("s") == []
