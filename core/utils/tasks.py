"""Running code the framework does not own, and ending tasks it does: `call_handler` calls a sync or async handler
without blocking the loop; `cancel_and_wait` ends a task without swallowing a cancellation of its caller.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["call_handler", "cancel_and_wait"]


async def call_handler(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call `fn`: awaited when async, in a worker thread when sync (so it cannot block the loop); an awaitable it
    returns is awaited too."""
    if inspect.iscoroutinefunction(fn):
        return await fn(*args, **kwargs)
    result = await anyio.to_thread.run_sync(lambda: fn(*args, **kwargs))
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
