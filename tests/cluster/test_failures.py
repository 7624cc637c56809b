"""The rows of docs/scale-out.md's failure table not covered by the bursts (test_scale_out.py, test_outage.py),
each on a real NATS server: a worker restarted under the same name takes its partitions back at once; a worker
that stalls past its lease (SIGSTOP) loses its partitions and, resumed, answers nothing twice; a gateway stopped
while the server is away publishes its spool at its next start; a malformed message is dropped and its partition
goes on; a message too large for the stream is refused with a notice to its sender; a reply the server delivered
and the gateway never got comes again at once, before the session's later replies."""

from __future__ import annotations

import asyncio
import json
import signal

import nats
import pytest

from core.chat import KiraIMMessage, MessageChain, Session, User
from core.chat.message_elements import Text
from core.chat.wire import chain_to_wire, message_to_wire, session_to_wire
from core.cluster import Bus, ClusterHistory, Gateway, Worker, partition_of
from core.config import HookchatConfig
from core.testing import EchoProvider, RecordingAdapter
from tests.cluster.test_outage import settled
from tests.cluster.test_scale_out import answered, config_of, message, wait_for, write_config

pytestmark = [pytest.mark.slow, pytest.mark.anyio]


def in_process_config(tmp_path, url: str, role: str) -> HookchatConfig:
    return HookchatConfig.model_validate(
        {
            "data": {"dir": str(tmp_path / role)},
            "trace": {"enabled": False},
            "cluster": {"url": url, "partitions": 8, "receipt_timeout": 0},
            "plugins": {"config": {"chat": {"flush_messages": 1}}},
        }
    )


async def test_a_worker_restarted_under_its_name_takes_its_partitions_back_at_once(tmp_path, nats_server, workers):
    # ack_wait is far longer than the test may take: a message the killed run held must come again at once.
    config = write_config(tmp_path, nats_server.url, "worker", ack_wait=300.0, lease_seconds=6.0)
    killed = workers(config, "w", slow=True)
    killed.wait_ready()
    adapter = RecordingAdapter("test")
    async with Gateway(config_of(write_config(tmp_path, nats_server.url, "gateway")), [adapter], name="gw") as gw:
        for n in range(3):
            for s in range(20):
                await gw.receive(message(s, n))
        await wait_for(lambda: len(adapter.sent) >= 3, 60, "the first answers")
        killed.kill()  # SIGKILL while it holds a message on most partitions
        workers(config, "w", slow=True).wait_ready()  # at once, under the same name
        await wait_for(
            lambda: all(answered(adapter).get(s) == [0, 1, 2] for s in range(20)),
            90,
            "every message answered, well before ack_wait",
        )
    log = killed.log.read_text()
    assert "back from its earlier run" in log and "held by its earlier run comes again now" in log


async def test_a_worker_taking_back_its_partition_answers_what_it_had_parked_first(tmp_path, nats_server, caplog):
    # The lease is this worker's from an earlier run (same name), and a message of it is parked: the turn that
    # recovery queues begins while the held message is taken back (a round trip), and must find the partition owned
    # by then. (It was put off as moved, left for a sweep many seconds later, and newer messages overtook it.)
    config = in_process_config(tmp_path, nats_server.url, "w")
    config.cluster.lease_seconds = 60.0  # no sweep within the test
    setup = Bus(config.cluster, "setup")
    await setup.connect()
    try:
        first = message(0, 0)
        sid = first.session.sid  # type: ignore[union-attr] - message() names the session
        assert setup.leases is not None
        await setup.leases.create(f"p{setup.partition(sid)}", b"w")
        history = ClusterHistory(setup, max_turns=None, max_tokens=None, done=lambda ids: asyncio.sleep(0))
        await history.park(sid, "parked-0", {"id": "parked-0", "gw": "gw", "message": message_to_wire(first)})
    finally:
        await setup.close()
    adapter = RecordingAdapter("test")
    async with (
        Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [adapter], name="gw") as gw,
        Worker(config, provider=EchoProvider(), name="w", entry_points=False),
    ):
        await gw.receive(message(0, 1))
        await wait_for(lambda: answered(adapter).get(0) == [0, 1], 30, "the parked message answered, then the next")
    assert "put off" not in caplog.text


@pytest.mark.parametrize("follower_first", [False, True], ids=["next-after-restart", "next-held-behind-the-stuck-turn"])
async def test_a_turn_killed_between_its_reply_and_its_storing_is_redone_and_its_reply_not_sent_again(
    tmp_path, nats_server, workers, follower_first
):
    # One message a turn (flush_messages = 1), nothing parked: the batch is not written down before the turn; the
    # redelivered message forms it again, so the redo's reply carries the same id and is not sent a second time.
    # With `follower_first`, each session's next message arrives while its first turn is stuck, so after the kill
    # both come again at once: the redo must still answer the first alone, then the second, not the two in one batch.
    config = write_config(tmp_path, nats_server.url, "worker", ack_wait=300.0, lease_seconds=6.0)
    config.write_text(config.read_text().replace("flush_messages = 5", "flush_messages = 1"))
    stuck = workers(config, "w", stuck=True)
    stuck.wait_ready()
    adapter = RecordingAdapter("test")
    async with Gateway(config_of(write_config(tmp_path, nats_server.url, "gateway")), [adapter], name="gw") as gw:
        for s in range(4):
            await gw.receive(message(s, 0))
        await wait_for(lambda: len(adapter.sent) >= 4, 60, "the replies of the stuck turns")
        if follower_first:
            for s in range(4):
                await gw.receive(message(s, 1))  # held behind the stuck turn, not answered
            await asyncio.sleep(1)
        stuck.kill()  # every turn sent its reply and stored nothing
        workers(config, "w").wait_ready()
        if not follower_first:
            for s in range(4):
                await gw.receive(message(s, 1))
        await wait_for(lambda: all(len(answered(adapter).get(s, [])) >= 2 for s in range(4)), 60, "the next answers")
        await asyncio.sleep(2)  # anything sent twice would arrive by now
    assert {s: answered(adapter).get(s) for s in range(4)} == {s: [0, 1] for s in range(4)}


async def test_a_worker_stalled_past_its_lease_loses_its_partitions_and_answers_nothing_twice(
    tmp_path, nats_server, workers
):
    config = write_config(tmp_path, nats_server.url, "worker", ack_wait=6.0, lease_seconds=3.0)
    stalled, other = workers(config, "a"), workers(config, "b")
    stalled.wait_ready()
    other.wait_ready()
    await settled(config_of(config), ["a", "b"])
    adapter = RecordingAdapter("test")
    async with Gateway(config_of(write_config(tmp_path, nats_server.url, "gateway")), [adapter], name="gw") as gw:
        for s in range(40):
            await gw.receive(message(s, 0))
        stalled.proc.send_signal(signal.SIGSTOP)  # frozen with what it holds; its leases expire
        try:
            for n in range(1, 5):
                for s in range(40):
                    await gw.receive(message(s, n))
            await settled(config_of(config), ["b"])  # the other worker took every partition
        finally:
            stalled.proc.send_signal(signal.SIGCONT)  # it resumes, finds its leases gone, and stops
        await wait_for(
            lambda: all(len(answered(adapter).get(s, [])) >= 5 for s in range(40)), 90, "every message answered"
        )
        await asyncio.sleep(3)  # anything answered twice would arrive by now
    wrong = {s: a for s, a in answered(adapter).items() if a != [0, 1, 2, 3, 4]}
    assert not wrong, f"answered out of order or twice: {list(wrong.items())[:3]}"
    assert "lost partition" in stalled.log.read_text()


async def test_a_gateway_stopped_while_the_server_is_away_publishes_its_spool_at_its_next_start(tmp_path, nats_server):
    async with Worker(
        in_process_config(tmp_path, nats_server.url, "w"), provider=EchoProvider(), name="w", entry_points=False
    ):
        first = RecordingAdapter("test")
        gateway = Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [first], name="gw")
        await gateway.start()
        try:
            await asyncio.to_thread(nats_server.stop)
            for n in range(5):
                for s in range(4):
                    await gateway.receive(message(s, n))  # spooled: the server is away
            assert gateway.outbox.pending == 20
        finally:
            await gateway.aclose()  # what it spooled stays in its data directory
        assert not first.sent
        await asyncio.to_thread(nats_server.start)
        second = RecordingAdapter("test")
        async with Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [second], name="gw"):
            await wait_for(
                lambda: all(answered(second).get(s) == list(range(5)) for s in range(4)),
                60,
                "the spooled messages answered, in order",
            )


async def test_a_malformed_message_is_dropped_and_its_partition_goes_on(tmp_path, nats_server):
    config = in_process_config(tmp_path, nats_server.url, "w")
    adapter = RecordingAdapter("test")
    async with (
        Worker(config, provider=EchoProvider(), name="w", entry_points=False),
        Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [adapter], name="gw") as gw,
    ):
        partition = partition_of("test:dm:u7", 8)
        nc = await nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await js.publish(f"hookchat.in.{partition}", b"{not json")
            await js.publish(f"hookchat.in.{partition}", json.dumps({"id": "x", "message": {"chain": 3}}).encode())
        finally:
            await nc.close()
        await gw.receive(message(7, 0))
        await wait_for(lambda: answered(adapter).get(7) == [0], 30, "the next message of the partition")


async def test_a_message_the_stream_refuses_for_good_is_told_to_its_sender(tmp_path, nats_server):
    adapter = RecordingAdapter("test")
    async with Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [adapter], name="gw") as gw:
        huge = KiraIMMessage(
            MessageChain([Text("x" * 2_000_000)]), User("u1"), Session("test", "dm", "u1"), message_id="huge"
        )  # above the server's 1 MiB payload limit
        await gw.receive(huge)
        await gw.receive(message(1, 0))  # the session's next message is not held up behind it
        await wait_for(lambda: adapter.sent, 30, "the sender to be told")
    notice = adapter.sent[0].chain.message_repr
    assert notice.startswith("Sorry, I could not take your message") and "xxxx" in notice
    assert gw.outbox.pending == 0


class GatedAdapter(RecordingAdapter):
    """Records what it sends, holding the first send until `gate` is set."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.gate = asyncio.Event()
        self.holding = False

    async def send(self, session, chain):
        if not self.sent and not self.gate.is_set():
            self.holding = True
            await self.gate.wait()
        return await super().send(session, chain)


async def test_a_reply_delivered_to_the_gateway_and_lost_comes_again_at_once_before_the_later_ones(
    tmp_path, nats_server
):
    """A delivery lost on its way (as when the server goes away just after sending it) is taken here by a second
    connection that never acknowledges it. Without the gateway's consumer reset it would come `ack_wait` (30 s)
    later, after the session's next reply."""
    adapter = GatedAdapter("test")
    session = Session("test", "dm", "u1")
    async with Gateway(in_process_config(tmp_path, nats_server.url, "gateway"), [adapter], name="gw") as gw:
        bus = gw.bus

        async def reply(n: int) -> None:
            data = {
                "id": f"r{n}",
                "session": session_to_wire(session),
                "chain": chain_to_wire(MessageChain([Text(f"r{n}")])),
            }
            await bus.publish(bus.out_subject("gw"), data, f"r{n}")

        await reply(0)
        await wait_for(lambda: adapter.holding, 10, "the gateway to be sending the first reply")

        async def idle() -> bool:  # the gateway's own pull request has expired: the next reply waits in the stream
            return (await bus.js.consumer_info(bus.out_stream, "gw-gw")).num_waiting == 0

        deadline = asyncio.get_running_loop().time() + 10
        while not await idle():
            assert asyncio.get_running_loop().time() < deadline, "the gateway's pull request did not expire"
            await asyncio.sleep(0.1)
        await reply(1)
        await reply(2)
        other = await nats.connect(nats_server.url)
        try:
            stolen = await other.jetstream().pull_subscribe_bind(durable="gw-gw", stream=bus.out_stream)
            [lost] = await stolen.fetch(1, timeout=5)
            assert json.loads(lost.data)["id"] == "r1"  # delivered, and never acknowledged
            adapter.gate.set()
            await wait_for(lambda: len(adapter.sent) == 3, 20, "all three replies sent")
        finally:
            await other.close()
    assert [r.chain.message_repr for r in adapter.sent] == ["r0", "r1", "r2"]
