"""The `Publisher` on a real NATS server: many publishes wait at once, each for its own answer, and one that is never
answered fails at its own deadline (the shorter first), while the others still succeed."""

from __future__ import annotations

import asyncio

import nats.errors
import pytest

from core.cluster import Bus
from core.config import ClusterConfig

pytestmark = [pytest.mark.anyio]


@pytest.fixture
async def bus(nats_server):
    bus = Bus(ClusterConfig(url=nats_server.url, partitions=1), "w")
    await bus.connect()
    yield bus
    await bus.close()


async def test_a_publish_nobody_answers_fails_at_its_deadline_and_the_others_succeed(bus):
    await bus.nc.subscribe("silent.x")  # takes what is published there and never answers
    patient = asyncio.ensure_future(bus.publisher.publish("silent.x", b"", timeout=30.0))
    hasty = asyncio.ensure_future(bus.publisher.publish("silent.x", b"", timeout=0.2))
    stored = await bus.publisher.publish(bus.in_subject(0), b"{}", {"Nats-Msg-Id": "m1"})
    done, _ = await asyncio.wait({patient, hasty}, return_when=asyncio.FIRST_COMPLETED)
    assert stored == 1 and done == {hasty}
    with pytest.raises(nats.errors.TimeoutError):
        await hasty
    assert not patient.done()
    patient.cancel()
    assert await bus.publisher.publish(bus.in_subject(0), b"{}", {"Nats-Msg-Id": "m2"}) == 2
