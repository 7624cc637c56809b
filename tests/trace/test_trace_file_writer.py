"""The JSON-lines file's writer process: it writes what the thread would, the sink moves to it once busy, and
whether it cannot start, is killed mid-run or outlives a killed bot, no trace goes missing without a word and no
process is left behind."""

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_turn_trace import Censor, Probe, _Recorded, _without_durations, script

from core.testing import ChatHarness, ScriptedProvider
from core.trace import JsonLinesSink, read_json_lines
from core.trace import _sinks as sinks
from core.trace._spans import _chain
from core.trace._writer import pack

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]


def _wait_for(condition, what: str, limit: float = 30.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after `limit` seconds (a generous bound, not a timing)."""
    deadline = time.monotonic() + limit
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not happen within {limit} s")
        time.sleep(0.02)


def _ended(pid: int) -> bool:
    """True once process `pid` is gone or a zombie (its parent, killed, cannot reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def _ids(path: Path) -> list[str]:
    return [t["id"] for t in read_json_lines(path)]


async def test_the_writer_process_writes_a_turn_as_the_ring_shows_it(tmp_path):
    provider = ScriptedProvider(script())
    async with ChatHarness(plugins=[Probe, Censor], provider=provider, config={"trace": {"file": ""}}) as bot:
        await bot.send("what does hi mean?")
        traces = list(reversed(bot.app.tracer.recent()))
        shown = [json.loads(json.dumps(t.to_dict(), default=str)) for t in traces]
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, process_after=0)
    for trace in traces:
        sink.write(trace)
    _wait_for(lambda: sink.writer_pid is not None, "the writer process's start")
    pid = sink.writer_pid
    sink.close()
    assert pid is not None and _ended(pid), "close() waits for the writer process"
    assert _without_durations(read_json_lines(path)) == _without_durations(shown)


def test_a_busy_sink_moves_its_writing_to_the_process(tmp_path):
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, batch_delay=0, process_after=3)
    for i in range(3):
        sink.write(_Recorded(f"t{i}", "before"))
    _wait_for(lambda: len(_ids(path)) == 3, "the thread's writing")
    assert sink.writer_pid is None, "a few traces are written by the thread: no process for them"
    sink.write(_Recorded("t3", "after"))
    _wait_for(lambda: len(_ids(path)) == 4, "the process's writing")
    assert sink.writer_pid is not None
    sink.close()
    assert _ids(path) == ["t0", "t1", "t2", "t3"]


@pytest.mark.parametrize("executable", ["/nonexistent/python", "/bin/false"])
def test_a_writer_process_that_cannot_start_leaves_the_writing_to_the_thread(tmp_path, monkeypatch, caplog, executable):
    monkeypatch.setattr(sys, "executable", executable)
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, process_after=0)
    with caplog.at_level(logging.WARNING, "hookchat.trace"):
        for i in range(5):
            sink.write(_Recorded(f"t{i}", "text"))
        sink.close()
    assert _ids(path) == [f"t{i}" for i in range(5)]
    assert sink.writer_pid is None
    assert any("writer thread writes" in r.getMessage() for r in caplog.records)


def test_a_killed_writer_process_is_replaced_by_the_thread_with_a_warning(tmp_path, caplog):
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, batch_delay=0, process_after=0)
    for i in range(5):
        sink.write(_Recorded(f"t{i}", "before"))
    _wait_for(lambda: len(_ids(path)) == 5, "the process's writing")
    pid = sink.writer_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    _wait_for(lambda: _ended(pid), "the writer process's end")
    with caplog.at_level(logging.WARNING, "hookchat.trace"):
        for i in range(5, 10):
            sink.write(_Recorded(f"t{i}", "after"))
        sink.close()
    assert _ids(path) == [f"t{i}" for i in range(10)]
    assert any("writer process ended (killed by signal 9)" in r.getMessage() for r in caplog.records)


def test_the_writer_process_ends_when_the_bot_is_killed(tmp_path):
    path = tmp_path / "traces.jsonl"
    bot = textwrap.dedent(
        f"""
        import os, signal, sys, time
        from pathlib import Path
        sys.path.insert(0, {str(ROOT)!r})
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from core.trace import JsonLinesSink, read_json_lines
        from test_turn_trace import _Recorded

        path = Path({str(path)!r})
        sink = JsonLinesSink(path, max_bytes=1 << 20, batch_delay=0, process_after=0)
        sink.write(_Recorded("t0", "text"))
        while not path.is_file() or not read_json_lines(path):
            time.sleep(0.02)
        print(sink.writer_pid, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    run = subprocess.run([sys.executable, "-c", bot], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == -signal.SIGKILL, run.stderr
    pid = int(run.stdout)
    _wait_for(lambda: _ended(pid), "the end of the killed bot's writer process")
    assert _ids(path) == ["t0"]


def test_a_batch_that_fails_to_go_out_is_logged_and_the_next_ones_are_written(tmp_path, monkeypatch, caplog):
    failures = iter([RuntimeError("a bug in packing")])

    def pack_failing_once(frames):
        for error in failures:
            raise error
        return pack(frames)

    monkeypatch.setattr(sinks, "pack", pack_failing_once)
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, batch_delay=0, process_after=0)
    with caplog.at_level(logging.ERROR, "hookchat.trace"):
        sink.write(_Recorded("t0", "lost"))
        _wait_for(lambda: any("could not write 1 trace" in r.getMessage() for r in caplog.records), "the error")
        sink.write(_Recorded("t1", "written"))
        sink.close()
    assert _ids(path) == ["t1"]


def test_a_snapshot_that_does_not_pickle_reaches_the_writer_process_as_its_notes(tmp_path):
    class Hook:
        fn = staticmethod(test_a_snapshot_that_does_not_pickle_reaches_the_writer_process_as_its_notes)
        plugin_id, hook_name, event, priority, deadline = "demo", "rewrite", "after_xml_parse", 0, 10.0

    class Text(str):
        """A class of the test's own: pickle cannot find it by name."""

    class Recorded(_Recorded):
        def records(self, table) -> list:
            return [(table.chain((Hook,)), [100_000, 300_000], 0)]  # its notes are made of extras[0]

        def compact(self, table, extras) -> tuple:
            extras.append((_chain, [("hi",), (Text("ho"),)], {}, False))  # the outgoing chain before and after
            return super().compact(table, extras)

    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, process_after=0)
    sink.write(Recorded("t0", "text"))
    sink.close()
    [hook] = [h for t in read_json_lines(path) for item in t["timeline"] for h in item["hooks"]]
    assert (hook["function"], hook["changes"]) == ("rewrite", ["chain 'hi' -> 'ho'"])


def test_a_core_folder_in_the_working_directory_is_not_taken_for_the_writer(tmp_path, monkeypatch):
    # A bot run from a folder holding a `core` package of its own (a KiraAI checkout, say): `python -m` would import
    # that one first, and run its `core/trace/_child.py` as the writer.
    decoy = tmp_path / "project"
    (decoy / "core" / "trace").mkdir(parents=True)
    (decoy / "core" / "__init__.py").write_text("")
    (decoy / "core" / "trace" / "__init__.py").write_text("")
    (decoy / "core" / "trace" / "_child.py").write_text(
        "import pathlib, sys\npathlib.Path('ran').write_text('decoy')\nsys.stdout.buffer.write(b'r')\n"
    )
    monkeypatch.chdir(decoy)
    path = tmp_path / "traces.jsonl"
    sink = JsonLinesSink(path, max_bytes=1 << 20, batch_delay=0, process_after=0)
    sink.write(_Recorded("t0", "text"))
    _wait_for(lambda: _ids(path) == ["t0"], "the process's writing")
    assert sink.writer_pid is not None
    sink.close()
    assert not (decoy / "ran").exists(), "the working directory's core/trace/_child.py ran"
