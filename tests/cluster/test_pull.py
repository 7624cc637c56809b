"""A partition's standing pull request on a real NATS server: closed, it leaves the partition's next message to the
next owner at once (not after `ack_wait`), hands back what the server had sent it, and it keeps delivering after
the server restarts (which forgets the request). A partition stopped while its turn runs ends its pull at once, so
its next message goes to the next owner as a first delivery."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from core.cluster import Bus
from core.cluster._bus import NATS_ERRORS, StandingPull
from core.cluster._intake import _end_on
from core.cluster._publish import subscribe_direct
from core.config import ClusterConfig

pytestmark = [pytest.mark.anyio]


@pytest.fixture
async def buses(nats_server):
    opened: list[Bus] = []

    async def connect(name: str) -> Bus:
        bus = Bus(ClusterConfig(url=nats_server.url, partitions=1, ack_wait=30.0), name)
        await bus.connect()
        opened.append(bus)
        return bus

    yield connect
    for bus in opened:
        await bus.close()


async def _next(pull: StandingPull):
    for _ in range(20):
        if (msg := await pull.next(0.25)) is not None:
            return msg
    raise AssertionError("no message came")


async def test_a_closed_pull_leaves_the_next_message_to_the_next_owner(buses):
    first, second = await buses("w1"), await buses("w2")
    pull = await StandingPull.open(first, "part-0")
    for n in (1, 2):
        await first.publish(first.in_subject(0), {"n": n}, msg_id=f"m{n}")
    held = await _next(pull)
    assert await pull.close() == []  # the partition lets one message out at a time: nothing else was sent
    await held.ack_sync()  # the turn ends after the hand-over began: the server has no request to send m2 to

    info = await first.js.consumer_info(first.in_stream, "part-0")
    assert (info.num_ack_pending, info.num_waiting) == (0, 0)
    taken = await _next(await StandingPull.open(second, "part-0"))
    assert (taken.data, taken.metadata.num_delivered) == (b'{"n": 2}', 1)


async def test_what_the_server_sent_before_the_close_is_handed_back(buses):
    first, second = await buses("w1"), await buses("w2")
    pull = await StandingPull.open(first, "part-0")
    await first.publish(first.in_subject(0), {"n": 1}, msg_id="m1")
    while (await first.js.consumer_info(first.in_stream, "part-0")).num_ack_pending == 0:
        await asyncio.sleep(0.05)  # sent to the pull, not taken by `next`
    [left] = await pull.close()
    await left.nak()
    taken = await _next(await StandingPull.open(second, "part-0"))
    assert (taken.data, taken.metadata.num_delivered) == (b'{"n": 1}', 2)


async def test_a_pull_delivers_again_after_the_server_restarts(buses, nats_server):
    bus = await buses("w1")
    pull = await StandingPull.open(bus, "part-0")
    nats_server.restart(kill=True)  # the request lived in the killed server's memory
    for _ in range(100):
        with contextlib.suppress(*NATS_ERRORS):
            await bus.publish(bus.in_subject(0), {"n": 1}, msg_id="m1", timeout=0.5)
            break
        await asyncio.sleep(0.1)
    for _ in range(int(StandingPull.EXPIRES / 2 / 0.25)):  # well before the lost request would have expired
        if (msg := await pull.next(0.25)) is not None:
            assert msg.data == b'{"n": 1}'
            return
    raise AssertionError("the pull was not made again after the reconnection")


async def test_a_partition_stopped_while_its_turn_runs_leaves_its_next_message_to_the_next_owner(buses):
    first, second = await buses("w1"), await buses("w2")
    stop = asyncio.Event()
    pull = await StandingPull.open(first, "part-0")
    ending = asyncio.ensure_future(_end_on(stop, pull))
    for n in (1, 2):
        await first.publish(first.in_subject(0), {"n": n}, msg_id=f"m{n}")
    held = await _next(pull)
    stop.set()  # the lease is handed over while the turn of m1 runs
    await ending
    await held.ack_sync()  # the turn ends and is stored
    taken = await _next(await StandingPull.open(second, "part-0"))
    assert (taken.data, taken.metadata.num_delivered) == (b'{"n": 2}', 1)  # not delivered to w1 and let go


async def test_a_direct_subscription_outlives_a_handler_that_fails(buses):
    """`subscribe_direct` runs its handler inside the connection's reader: one that raises is logged, and the
    subscription, the connection and the publishes waiting on it go on."""
    bus = await buses("w1")
    seen: list[bytes] = []

    def handler(msg) -> None:
        seen.append(msg.data)
        if msg.data == b"bad":
            raise ValueError("a broken handler")

    await subscribe_direct(bus.nc, "probe.direct", handler)
    for data in (b"one", b"bad", b"two"):
        await bus.nc.publish("probe.direct", data)
    await bus.nc.flush()
    await bus.publish(bus.in_subject(0), {"n": 1}, msg_id="m1")  # waits on the Publisher's direct subscription
    assert seen == [b"one", b"bad", b"two"]
    assert bus.nc.is_connected
