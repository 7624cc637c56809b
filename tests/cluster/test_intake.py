"""A worker's intake on a real NATS server: a partition's next message is taken as soon as the message before it is
acknowledged (its turn stored), not once that turn's last hooks (`final_result`) end, so a slow memory plugin does
not hold up the other sessions of its partition."""

from __future__ import annotations

import asyncio

import pytest

from core.cluster import Gateway, Worker
from core.plugin import BasePlugin, on
from core.testing import EchoProvider, RecordingAdapter
from tests.cluster.test_failures import in_process_config
from tests.cluster.test_scale_out import answered, message, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


class SlowMemory(BasePlugin):
    """Session u0's `final_result` hook waits (up to 20 s) for session u1's message, which comes through the same
    partition, and notes whether it came meanwhile."""

    u1_came = asyncio.Event()
    came_meanwhile: bool | None = None

    @on.im_message()
    async def note(self, event, *args, **kwargs):
        if event.session.sid == "test:dm:u1":
            SlowMemory.u1_came.set()

    @on.final_result(deadline=60)  # not cut off by the default deadline (10 s)
    async def remember(self, event, *args, **kwargs):
        if event.sid == "test:dm:u0":
            try:
                await asyncio.wait_for(SlowMemory.u1_came.wait(), 20)
            except TimeoutError:
                SlowMemory.came_meanwhile = False
            else:
                SlowMemory.came_meanwhile = True


async def test_a_slow_final_result_hook_does_not_hold_up_the_next_message_of_its_partition(tmp_path, nats_server):
    SlowMemory.u1_came, SlowMemory.came_meanwhile = asyncio.Event(), None  # the event of this test's loop
    config = in_process_config(tmp_path, nats_server.url, "w")
    gateway_config = in_process_config(tmp_path, nats_server.url, "gateway")
    config.cluster.partitions = gateway_config.cluster.partitions = 1  # u0 and u1 share the one partition
    adapter = RecordingAdapter("test")
    async with (
        Worker(config, provider=EchoProvider(), plugins=[SlowMemory], name="w", entry_points=False) as worker,
        Gateway(gateway_config, [adapter], name="gw") as gw,
    ):
        await gw.receive(message(0, 0))
        await gw.receive(message(1, 0))
        await wait_for(lambda: answered(adapter) == {0: [0], 1: [0]}, 30, "both sessions answered")
        await wait_for(lambda: not worker.app.scheduler.busy(), 30, "u0's turn ended")
    assert SlowMemory.came_meanwhile is True
