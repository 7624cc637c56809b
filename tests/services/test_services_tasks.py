"""`cancel_and_wait`: ending a task without turning the caller's own cancellation into a normal return, and
`call_handler`: sync handlers in a worker thread, async ones awaited."""

import asyncio
import threading

import pytest

from core.utils.tasks import call_handler, cancel_and_wait

pytestmark = pytest.mark.anyio


async def test_the_tasks_own_cancellation_is_absorbed():
    task = asyncio.create_task(asyncio.sleep(3600))
    await cancel_and_wait(task)
    assert task.cancelled()
    await cancel_and_wait(None)


async def test_the_callers_cancellation_propagates():
    stubborn_started = asyncio.Event()

    async def stubborn():
        stubborn_started.set()
        await asyncio.sleep(3600)

    inner = asyncio.create_task(stubborn())
    await asyncio.wait_for(stubborn_started.wait(), 10)
    outer = asyncio.create_task(cancel_and_wait(inner))
    await asyncio.sleep(0)  # outer now waits for inner
    outer.cancel()
    with pytest.raises(asyncio.CancelledError):
        await outer
    assert inner.cancelled()


async def test_an_exception_of_the_task_propagates():
    async def failing():
        raise LookupError("inner failure")

    task = asyncio.create_task(failing())
    await asyncio.sleep(0)
    with pytest.raises(LookupError):
        await cancel_and_wait(task)


async def test_sync_handlers_run_in_a_worker_thread_and_async_ones_on_the_loop():
    loop_thread = threading.get_ident()

    async def on_loop(x):
        return threading.get_ident(), x

    def in_thread(*, x):
        return threading.get_ident(), x

    assert await call_handler(on_loop, 1) == (loop_thread, 1)
    thread, value = await call_handler(in_thread, x=2)
    assert thread != loop_thread and value == 2
