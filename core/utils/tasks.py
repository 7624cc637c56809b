"""Running code the framework does not own, and owning the tasks it starts: `call_handler` calls a sync or async
handler without blocking the loop; `must_propagate` says which `BaseException` of such code is not its failure;
`cancel_and_wait` ends a task without swallowing a cancellation of its caller; `TaskOwner` is the one way an owner
starts, keeps and stops its background tasks.
"""

from __future__ import annotations

import asyncio
import asyncio.runners
import inspect
import logging
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import anyio

__all__ = [
    "call_handler",
    "cancel_and_wait",
    "contain",
    "ContainedBaseException",
    "must_propagate",
    "raised_at",
    "wait_or_abandon",
    "TaskOwner",
    "SHUTDOWN_GRACE",
]

T = TypeVar("T")

_log = logging.getLogger("hookchat")

#: Seconds a cancelled task (or a shutdown stage) gets to end before it is abandoned with a log line.
SHUTDOWN_GRACE = 5.0


#: The frame a real Ctrl-C raises `KeyboardInterrupt` from under `asyncio.run` (its second SIGINT handler call).
_SIGINT_HANDLER = asyncio.runners.Runner._on_sigint.__code__  # pyright: ignore[reportAttributeAccessIssue] - private to asyncio, so not in typeshed


def must_propagate(exc: BaseException) -> bool:
    """Whether `exc`, raised out of code the framework does not own (a plugin's hook, tool, tag, timer, task),
    must go on up instead of being reported as that code's failure.

    Only two things propagate: a cancellation that someone requested of the running task (the framework, a
    deadline, a caller: `task.cancelling()` counts the requests), and the `KeyboardInterrupt` that `asyncio.run`
    raises for a real Ctrl-C. Everything else (`SystemExit`, a `KeyboardInterrupt` or `GeneratorExit` the code
    raised itself, a `CancelledError` that nobody requested) is the code's failure and must not end the process.
    """
    if isinstance(exc, Exception):
        return False
    if isinstance(exc, asyncio.CancelledError):
        try:
            task = asyncio.current_task()
        except RuntimeError:  # no running loop: nothing to tell it from
            return True
        return task is None or task.cancelling() > 0
    if isinstance(exc, KeyboardInterrupt):
        tb = exc.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return tb is not None and tb.tb_frame.f_code is _SIGINT_HANDLER
    return False


def raised_at(exc: BaseException, within: str | None = None) -> str:
    """`file:line` where `exc` was raised: its innermost frame in the file `within` when one is (a hook's own
    file), else its innermost frame; "?" without a traceback."""
    best = last = None
    tb = exc.__traceback__
    while tb is not None:
        last = tb
        if within is not None and tb.tb_frame.f_code.co_filename == within:
            best = tb
        tb = tb.tb_next
    chosen = best or last
    return f"{chosen.tb_frame.f_code.co_filename}:{chosen.tb_lineno}" if chosen is not None else "?"


class ContainedBaseException(Exception):
    """Code the framework does not own raised a `BaseException` that is its own failure (`SystemExit`,
    `KeyboardInterrupt`, `GeneratorExit`, an unrequested `CancelledError`; see `must_propagate`). In a task it is
    re-raised as this ordinary exception, because asyncio lets `SystemExit` and `KeyboardInterrupt` out of a task
    through the event loop, ending the process. The original is `__cause__`."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(f"{type(original).__name__}({original!s}) raised at {raised_at(original)}")
        self.original = original


async def contain(coro: Coroutine[Any, Any, T]) -> T:
    """Await `coro`, turning a `BaseException` that is its own failure into `ContainedBaseException`, so a task
    that runs code the framework does not own cannot end the process."""
    try:
        return await coro
    except Exception:
        raise
    except BaseException as exc:
        if must_propagate(exc):
            raise
        raise ContainedBaseException(exc) from exc


def _contained_task(coro: Coroutine[Any, Any, T], name: str) -> asyncio.Task[T]:
    """A task that runs `coro` under `contain`. A task cancelled before its first step never starts the wrapper,
    so `coro` is closed when the task ends (a no-op when it ran), or Python warns that it was never awaited."""
    task = asyncio.get_running_loop().create_task(contain(coro), name=name)
    task.add_done_callback(lambda _: coro.close())
    return task


async def call_handler(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `fn`: awaited when async, in a worker thread when sync (so it cannot block the loop); an awaitable it
    returns is awaited too.

    A thread cannot be cancelled: when the caller is cancelled (a deadline), a sync `fn` is abandoned in its
    worker thread, which runs on until `fn` returns, and its result is dropped. The caller logs that leak, since
    it knows what the handler is (a tool, a tag).
    """
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs), abandon_on_cancel=True)
    if inspect.isawaitable(result):
        result = await result
    return result


async def cancel_and_wait(task: asyncio.Task[Any] | None) -> None:
    """Cancel `task` (None: nothing to do) and wait until it has ended.

    The task's own `CancelledError` is absorbed; an exception it raised propagates. If the *caller* is cancelled
    meanwhile (or was already being cancelled), `CancelledError` is re-raised, so a `stop()` built on this never
    turns its caller's cancellation into a normal return.
    """
    if task is None:
        return
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if current is not None and current.cancelling():
            raise


async def wait_or_abandon(
    coro: Coroutine[Any, Any, Any], timeout: float, what: str, grace: float = SHUTDOWN_GRACE
) -> bool:
    """Run `coro` as a task and wait up to `timeout` seconds; past that, cancel it and wait `grace` seconds more,
    and if it still runs (it ignores cancellation), abandon it with a log line naming `what`. For shutdown
    stages that run code the framework does not own (contained: its `SystemExit` is a failure, logged). True
    when it ended in time; a cancellation of the caller propagates (and cancels the task)."""
    task = _contained_task(coro, what)
    try:
        done, _ = await asyncio.wait({task}, timeout=max(timeout, 0))
        if not done:
            task.cancel()
            done, _ = await asyncio.wait({task}, timeout=max(grace, 0))
    except asyncio.CancelledError:
        task.cancel()
        raise
    if not done:
        _log.error("%s did not end %g s after its cancellation: abandoned, still running", what, grace)
        return False
    if not task.cancelled() and task.exception() is not None:
        _log.error("%s failed", what, exc_info=task.exception())
    return not task.cancelled()


class TaskOwner:
    """The background tasks of one owner (the app's scheduler, the engine, a server, a plugin): every task is
    started through `spawn`, kept until it ends, its failure logged with the owner's name, and `aclose()` cancels
    and awaits whatever still runs. Nothing is fire-and-forget.

    Why not an anyio task group: owners start tasks from synchronous code that needs the handle back at once
    (`ctx.spawn()` returns the task, as plugins expect) and start and stop in different tasks (`start()` and
    `aclose()`), which a task group's scope cannot span. Work that starts and ends inside one call (the tools of
    one agent step) uses a task group.
    """

    def __init__(self, name: str, *, logger: logging.Logger | logging.LoggerAdapter | None = None) -> None:
        self.name = name
        self.closing = False
        self._logger = logger or _log
        self._tasks: set[asyncio.Task[Any]] = set()

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str | None = None) -> asyncio.Task[Any]:
        """Run `coro` as a task of this owner; refused (RuntimeError) once the owner is closing, since the task
        would outlive it."""
        if self.closing:
            coro.close()
            raise RuntimeError(f"{self.name} is stopping: it cannot start a background task")
        # Contained: a task's SystemExit would otherwise leave through the event loop and end the process.
        task = _contained_task(coro, f"{self.name}:{name or 'task'}")
        self._tasks.add(task)
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            self._logger.error("background task %s of %s failed", task.get_name(), self.name, exc_info=task.exception())

    @property
    def tasks(self) -> frozenset[asyncio.Task[Any]]:
        """The tasks still running."""
        return frozenset(self._tasks)

    def __len__(self) -> int:
        return len(self._tasks)

    async def join(self) -> None:
        """Wait until every task (including ones started meanwhile) has ended."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

    async def aclose(self, grace: float = SHUTDOWN_GRACE) -> None:
        """Refuse new tasks, then cancel every running one and wait for them (their failures are already logged).
        A task still running `grace` seconds after its cancellation ignores it: it is abandoned, with a log line,
        so one stuck task cannot hold up a shutdown. A cancellation of the caller propagates."""
        self.closing = True
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=grace)
        for task in pending:
            self._logger.error(
                "background task %s of %s ignored its cancellation for %g s: abandoned, still running",
                task.get_name(),
                self.name,
                grace,
            )
