"""Isolation: a hook that raises, hangs or blocks the event loop is reported with its plugin and hook, and the
other hooks still run; a cancellation from outside always reaches the caller."""

from __future__ import annotations

import asyncio
import logging
import time

import anyio
import pytest

from core.chat.message_utils import KiraEvent, KiraExceptionEvent
from core.plugin import HookEngine, HookTimeout, Priority, on, signals

pytestmark = pytest.mark.anyio


class Recorder:
    """Hooks that note that they ran, and `exception` hooks that keep what they were told."""

    def __init__(self, calls: list[str]) -> None:
        self.calls = calls
        self.failures: list[KiraExceptionEvent] = []

    @on.im_message(priority=Priority.LOW)
    async def after(self, event):
        self.calls.append("after")

    @on.exception()
    async def on_failure(self, event: KiraExceptionEvent):
        self.failures.append(event)


async def test_a_raising_hook_is_logged_reported_and_the_others_still_run(
    engine: HookEngine, caplog: pytest.LogCaptureFixture, record_signal
) -> None:
    calls: list[str] = []

    class Flaky:
        @on.im_message(priority=Priority.HIGH)
        async def explode(self, event):
            calls.append("explode")
            raise ValueError("boom")

    recorder = Recorder(calls)
    engine.register(Flaky(), name="flaky")
    engine.register(recorder, name="recorder")
    failed = record_signal(signals.hook_failed, sender=engine)
    message = KiraEvent()

    await engine.dispatch("im_message", message)

    assert calls == ["explode", "after"]
    [log] = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert "'flaky'" in log.getMessage() and "explode" in log.getMessage()
    assert "Traceback" in log.getMessage() and "ValueError: boom" in log.getMessage()

    [failure] = recorder.failures
    assert isinstance(failure.error, ValueError) and str(failure.error) == "boom"
    assert (failure.plugin_id, failure.hook_name, failure.event_name) == ("flaky", "explode", "im_message")
    assert failure.origin is message and not failure.timed_out
    assert "raise ValueError" in failure.traceback

    assert [(f["plugin_id"], f["hook_name"], f["timed_out"]) for f in failed] == [("flaky", "explode", False)]


async def test_a_failing_exception_hook_is_logged_but_not_reported_again(
    engine: HookEngine, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[str] = []

    class Broken:
        @on.im_message()
        async def explode(self, event):
            raise RuntimeError("first failure")

        @on.exception(priority=Priority.HIGH)
        async def clumsy_handler(self, event: KiraExceptionEvent):
            seen.append(f"clumsy saw {event.hook_name}")
            raise RuntimeError("the handler failed too")

        @on.exception()
        async def calm_handler(self, event: KiraExceptionEvent):
            seen.append(f"calm saw {event.hook_name}")

    engine.register(Broken(), name="broken")

    await engine.dispatch("im_message", KiraEvent())

    # Each exception hook heard of the original failure once; nobody heard of the handler's own failure.
    assert seen == ["clumsy saw explode", "calm saw explode"]
    logged = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert len(logged) == 2
    assert "clumsy_handler" in logged[1] and "the handler failed too" in logged[1]


async def test_a_hanging_hook_is_cancelled_at_its_deadline_and_the_others_still_run(
    engine: HookEngine, record_signal
) -> None:
    calls: list[str] = []

    class Stuck:
        @on.im_message(priority=Priority.HIGH, deadline=0.05)
        async def wait_forever(self, event):
            calls.append("wait_forever")
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                calls.append("wait_forever cancelled")
                raise

    recorder = Recorder(calls)
    engine.register(Stuck(), name="stuck")
    engine.register(recorder, name="recorder")
    failed = record_signal(signals.hook_failed, sender=engine)

    await engine.dispatch("im_message", KiraEvent())

    assert calls == ["wait_forever", "wait_forever cancelled", "after"]
    [failure] = recorder.failures
    assert failure.timed_out and isinstance(failure.error, HookTimeout)
    assert (failure.plugin_id, failure.hook_name) == ("stuck", "wait_forever")
    assert [(f["plugin_id"], f["timed_out"]) for f in failed] == [("stuck", True)]


async def test_the_default_deadline_applies_unless_a_hook_sets_its_own() -> None:
    engine = HookEngine(default_deadline=0.05)
    finished: list[str] = []

    class Slow:
        @on.im_message(priority=Priority.HIGH)
        async def uses_default(self, event):
            await anyio.sleep(5)
            finished.append("uses_default")

        @on.im_message(deadline=5)
        async def has_time(self, event):
            await anyio.sleep(0.2)  # past the 0.05 s default, within its own 5 s
            finished.append("has_time")

    engine.register(Slow(), name="slow")
    try:
        await engine.dispatch("im_message", KiraEvent())
    finally:
        await engine.aclose()

    assert finished == ["has_time"]


async def test_a_hook_that_swallows_its_cancellation_is_reported_and_later_deadlines_still_work(
    engine: HookEngine,
) -> None:
    calls: list[str] = []

    class Stubborn:
        @on.im_message(priority=Priority.HIGH, deadline=0.05)
        async def ignore_cancel(self, event):
            try:
                await asyncio.Event().wait()
            except asyncio.CancelledError:
                calls.append("swallowed")  # and returns as if nothing happened

        @on.im_message(deadline=0.05)
        async def hang(self, event):
            await asyncio.Event().wait()

    recorder = Recorder(calls)
    engine.register(Stubborn(), name="stubborn")
    engine.register(recorder, name="recorder")

    with anyio.fail_after(5):  # the swallowed cancel must not switch off the next hook's deadline
        await engine.dispatch("im_message", KiraEvent())

    assert calls == ["swallowed", "after"]
    assert sorted((f.hook_name, f.timed_out) for f in recorder.failures) == [("hang", True), ("ignore_cancel", True)]


async def test_cancelling_the_dispatching_task_propagates(engine: HookEngine, record_signal) -> None:
    calls: list[str] = []
    started = asyncio.Event()

    class Patient:
        @on.shutdown(priority=Priority.HIGH)
        async def wait(self, event):
            started.set()
            await asyncio.Event().wait()

    recorder = Recorder(calls)
    engine.register(Patient(), name="patient")
    engine.register(recorder, name="recorder")
    failed = record_signal(signals.hook_failed, sender=engine)

    task = asyncio.get_running_loop().create_task(engine.dispatch("shutdown", KiraEvent()))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert recorder.failures == [] and failed == []  # a cancellation is not a failure of the hook


async def test_a_cancel_scope_around_a_dispatch_still_works(engine: HookEngine) -> None:
    calls: list[str] = []

    class Patient:
        @on.im_message(priority=Priority.HIGH, deadline=10)
        async def wait(self, event):
            await anyio.sleep(10)

    recorder = Recorder(calls)
    engine.register(Patient(), name="patient")
    engine.register(recorder, name="recorder")

    with anyio.move_on_after(0.05) as scope:
        await engine.dispatch("im_message", KiraEvent())

    assert scope.cancelled_caught
    assert calls == [] and recorder.failures == []  # the dispatch was abandoned, not the hook "failed"


async def test_cancellation_from_outside_propagates_while_a_hook_timeout_is_pending(engine: HookEngine) -> None:
    calls: list[str] = []

    class Stuck:
        @on.shutdown(priority=Priority.HIGH, deadline=0.05)
        async def wait_forever(self, event):
            await asyncio.Event().wait()

    recorder = Recorder(calls)
    engine.register(Stuck(), name="stuck")
    engine.register(recorder, name="recorder")
    task = asyncio.get_running_loop().create_task(engine.dispatch("shutdown", KiraEvent()))

    # The moment the watchdog asks to cancel the hook, and before the task has run again, shutdown cancels too.
    with anyio.fail_after(5):
        while task.cancelling() == 0:  # a cancel request sets no event to wait on
            await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task

    assert calls == [] and recorder.failures == []  # abandoned, not continued as after a timeout


async def test_deadlines_still_work_in_a_task_that_survived_such_a_cancellation(engine: HookEngine) -> None:
    calls: list[str] = []

    class Stuck:
        @on.im_message(priority=Priority.HIGH, deadline=0.05)
        async def wait_forever(self, event):
            await asyncio.Event().wait()

    recorder = Recorder(calls)
    engine.register(Stuck(), name="stuck")
    engine.register(recorder, name="recorder")
    this_task = asyncio.current_task()
    assert this_task is not None

    async def cancel_when_the_watchdog_does() -> None:
        with anyio.fail_after(5):
            while this_task.cancelling() == 0:  # a cancel request sets no event to wait on
                await asyncio.sleep(0)
        this_task.cancel()

    helper = asyncio.get_running_loop().create_task(cancel_when_the_watchdog_does())
    with pytest.raises(asyncio.CancelledError):
        await engine.dispatch("im_message", KiraEvent())
    this_task.uncancel()  # this task carries on, as asyncio.timeout() does after its own cancellation
    await helper
    assert calls == []

    # The same task dispatches again: the hook is cut at its deadline, and nothing outside had to step in.
    with anyio.move_on_after(5) as outer:
        await engine.dispatch("im_message", KiraEvent())
    assert not outer.cancel_called
    assert calls == ["after"]
    assert [f.timed_out for f in recorder.failures] == [True]


async def test_deadlines_work_again_after_the_engine_was_closed(engine: HookEngine) -> None:
    calls: list[str] = []

    class Stuck:
        @on.im_message(priority=Priority.HIGH, deadline=0.05)
        async def wait_forever(self, event):
            await asyncio.Event().wait()

    recorder = Recorder(calls)
    engine.register(recorder, name="recorder")
    await engine.dispatch("im_message", KiraEvent())
    await engine.aclose()  # e.g. a test's teardown, or an app that stops and starts again
    engine.register(Stuck(), name="stuck")

    with anyio.move_on_after(5) as outer:
        await engine.dispatch("im_message", KiraEvent())

    assert not outer.cancel_called
    assert calls == ["after", "after"]
    assert [(f.hook_name, f.timed_out) for f in recorder.failures] == [("wait_forever", True)]


async def test_a_hook_that_blocks_the_event_loop_is_named(caplog: pytest.LogCaptureFixture, record_signal) -> None:
    engine = HookEngine(stall_threshold=0.05)
    stalls = record_signal(signals.loop_stalled, sender=engine)

    class Blocking:
        @on.im_message()
        async def sleepy(self, event):
            time.sleep(0.3)  # noqa: ASYNC251 - blocking on purpose: every other task and hook waits

    engine.register(Blocking(), name="blocking")
    try:
        await engine.dispatch("im_message", KiraEvent())
    finally:
        await engine.aclose()

    assert [(s["plugin_id"], s["hook_name"]) for s in stalls][:1] == [("blocking", "sleepy")]
    assert stalls[0]["seconds"] >= 0.05
    warning = next(r.getMessage() for r in caplog.records if "event loop blocked" in r.getMessage())
    assert "'blocking'" in warning and "sleepy" in warning
