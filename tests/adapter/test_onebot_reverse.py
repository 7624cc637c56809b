"""The OneBot adapter in reverse mode: hookchat serves, implementations connect. The handshake checks, the mock's
protocol over a connection the test opens, several accounts, action deadlines, faults, and a flood of events."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from typing import Any

import anyio
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from core.adapter import AdapterError
from core.adapter.onebot import ActionTimeout, NotConnected, OneBotAdapter, OneBotError
from core.chat import KiraMessageEvent, MessageChain, Session
from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on
from core.testing import ScriptedProvider
from tests.adapter.conftest import recorder, running_bot
from tests.adapter.napcat import BOT_ID, FRIEND_ID, GROUP_ID, MockPeer, implementation_headers

pytestmark = pytest.mark.anyio

TOKEN = "reverse-s3cret"


def reverse_adapter(**options: Any) -> OneBotAdapter:
    return OneBotAdapter("qq", mode="reverse", port=0, token=TOKEN, **options)


def url_of(adapter: OneBotAdapter, path: str = "/onebot/v11/ws") -> str:
    return f"ws://127.0.0.1:{adapter.port}{path}"


def private_event(user_id: int | str, text: str, *, message_id: int = 1, self_id: str = BOT_ID) -> dict[str, Any]:
    return {
        "post_type": "message",
        "message_type": "private",
        "sub_type": "friend",
        "message_id": message_id,
        "user_id": int(user_id),
        "message": [{"type": "text", "data": {"text": text}}],
        "raw_message": text,
        "font": 0,
        "sender": {"user_id": int(user_id), "nickname": f"user{user_id}"},
        "time": 1_700_000_000,
        "self_id": int(self_id),
    }


@pytest.mark.parametrize(
    ("headers", "path", "status"),
    [
        ({"X-Client-Role": "Universal", "Authorization": f"Bearer {TOKEN}"}, "/onebot/v11/ws", 400),  # no X-Self-ID
        (implementation_headers(BOT_ID, TOKEN, role="API"), "/onebot/v11/ws", 400),
        (implementation_headers(BOT_ID), "/onebot/v11/ws", 401),
        (implementation_headers(BOT_ID, "wrong"), "/onebot/v11/ws", 403),
        (implementation_headers(BOT_ID, TOKEN), "/elsewhere", 404),
        (implementation_headers("999", TOKEN), "/onebot/v11/ws", 403),  # not in self_ids
    ],
)
async def test_the_handshake_refuses_what_it_must(headers, path, status):
    adapter = reverse_adapter(self_ids=[BOT_ID])
    async with running_bot(adapter, ScriptedProvider()):
        with pytest.raises(InvalidStatus) as refused:
            async with connect(url_of(adapter, path), additional_headers=headers, proxy=None):
                pass
    assert refused.value.response.status_code == status


async def test_the_token_may_also_come_as_a_query_parameter():
    adapter = reverse_adapter()
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                f"{url_of(adapter)}?access_token={TOKEN}", proxy=None, additional_headers=implementation_headers(BOT_ID)
            ):
                assert await adapter.wait_connected() == BOT_ID


async def test_the_mocks_protocol_over_a_reverse_connection_and_a_second_connection_is_refused():
    adapter = reverse_adapter()
    peer = MockPeer()
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["Reverse hello."]), plugins=[Recorder]):
        with anyio.fail_after(10):
            async with peer.reverse_link(url_of(adapter), token=TOKEN):
                await adapter.wait_connected(BOT_ID)
                async with connect(
                    url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
                ) as second:
                    with pytest.raises(ConnectionClosed):
                        await second.recv()
                assert second.close_code == 1008 and "already connected" in second.close_reason
                await peer.server.inject_group_message(
                    GROUP_ID,
                    FRIEND_ID,
                    [{"type": "at", "data": {"qq": BOT_ID}}, {"type": "text", "data": {"text": " hi"}}],
                )
                event = await inbox.get()
                sent = await peer.next_sent()
    assert event.sid == f"qq:gm:{GROUP_ID}" and event.is_mentioned
    assert sent == {
        "message_type": "group",
        "group_id": int(GROUP_ID),
        "message": [{"type": "text", "data": {"text": "Reverse hello."}}],
    }
    assert adapter.stats().accounts == {BOT_ID: False}  # the first connection ended with the block


async def test_each_account_answers_the_sessions_it_heard_from():
    adapter = reverse_adapter()
    first, second = MockPeer("111"), MockPeer("222")
    async with running_bot(adapter, ScriptedProvider(["from 111", "from 222"])):
        with anyio.fail_after(10):
            async with (
                first.reverse_link(url_of(adapter), token=TOKEN),
                second.reverse_link(url_of(adapter), token=TOKEN),
            ):
                await adapter.wait_until(lambda s: s.accounts == {"111": True, "222": True})
                await first.server.inject_private_message(FRIEND_ID, "to the first bot")
                one = await first.next_sent()
                await second.server.inject_group_message(GROUP_ID, FRIEND_ID, [{"type": "at", "data": {"qq": "222"}}])
                two = await second.next_sent()
                with pytest.raises(OneBotError, match="several bot accounts"):
                    await adapter.call_action("get_login_info")
                assert (await adapter.get_login_info(self_id="222"))["user_id"] == "222"
    assert one["message"][0]["data"]["text"] == "from 111" and one["user_id"] == int(FRIEND_ID)
    assert two["message"][0]["data"]["text"] == "from 222" and two["group_id"] == int(GROUP_ID)
    assert first.calls("send_msg") == [one] and second.calls("send_msg") == [two]


async def test_an_unanswered_action_times_out_and_its_late_answer_is_ignored(caplog):
    adapter = reverse_adapter(action_timeout=0.05)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                login = json.loads(await ws.recv())  # the adapter asks who is logged in; nobody answers
                assert login["action"] == "get_login_info"
                with pytest.raises(ActionTimeout, match="get_status: no answer"):
                    await adapter.call_action("get_status")
                status = json.loads(await ws.recv())
                assert adapter.stats().pending_actions == 0
                with caplog.at_level(logging.DEBUG, "hookchat.adapter.onebot"):
                    await ws.send(json.dumps({"status": "ok", "retcode": 0, "data": {}, "echo": status["echo"]}))
                    await ws.send(json.dumps(private_event(FRIEND_ID, "after the late answer")))
                    await adapter.wait_until(lambda s: s.events_processed == 1)
    assert "came after its deadline" in caplog.text


async def test_a_malformed_answer_fails_its_call_at_once():
    adapter = reverse_adapter(action_timeout=300)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                await ws.recv()  # get_login_info, left unanswered
                call = asyncio.ensure_future(adapter.call_action("get_status"))
                status = json.loads(await ws.recv())
                await ws.send(json.dumps({"retcode": "not a number", "echo": status["echo"]}))
                with pytest.raises(OneBotError, match="answered with a malformed frame: answer frame: status"):
                    await call


async def test_pending_actions_are_bounded():
    adapter = reverse_adapter(max_pending_actions=1)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                await ws.recv()  # get_login_info, left unanswered: the one pending action
                with pytest.raises(OneBotError, match="1 actions are already waiting"):
                    await adapter.call_action("get_status")


async def test_malformed_frames_are_logged_and_skipped(caplog):
    adapter = reverse_adapter()
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["fine"]), plugins=[Recorder]):
        with anyio.fail_after(10), caplog.at_level(logging.WARNING, "hookchat.adapter.onebot"):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                for frame in ("not json", "[1, 2]", b"\xff\xfe", json.dumps({"post_type": "notice"})):
                    await ws.send(frame)
                await ws.send(json.dumps(private_event(FRIEND_ID, "the valid one")))
                event = await inbox.get()
    assert event.message.chain == MessageChain([Text("the valid one")])
    assert adapter.stats().malformed_frames == 4
    assert caplog.text.count("skipped a malformed frame") == 4
    assert "must be a JSON object, not list" in caplog.text and "notice_type: Field required" in caplog.text


async def test_an_oversized_frame_closes_the_connection_with_1009_and_the_account_may_come_back():
    adapter = reverse_adapter(max_frame_bytes=1024)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            headers = implementation_headers(BOT_ID, TOKEN)
            async with connect(url_of(adapter), additional_headers=headers, proxy=None) as ws:
                await ws.send(json.dumps(private_event(FRIEND_ID, "x" * 2048)))
                with pytest.raises(ConnectionClosed):
                    while True:
                        await ws.recv()
            assert ws.close_code == 1009
            await adapter.wait_until(lambda s: not s.accounts[BOT_ID])
            async with connect(url_of(adapter), additional_headers=headers, proxy=None):
                await adapter.wait_until(lambda s: s.accounts[BOT_ID] and s.connections_made == 2)


def heartbeat(interval_ms: int) -> str:
    """A OneBot v11 heartbeat meta event announcing the next one within `interval_ms`."""
    return json.dumps(
        {
            "post_type": "meta_event",
            "meta_event_type": "heartbeat",
            "interval": interval_ms,
            "status": {"online": True, "good": True},
            "time": 1,
            "self_id": int(BOT_ID),
        }
    )


async def test_a_silent_connection_after_heartbeats_is_closed():
    adapter = reverse_adapter()
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                await ws.send(heartbeat(20))
                await ws.wait_closed()  # three intervals without a frame
    assert ws.close_code == 1001 and ws.close_reason == "no heartbeat"


async def test_a_connection_whose_frames_keep_coming_outlives_its_heartbeat_deadline():
    # One deadline per stretch of frames (not a scope per frame): each frame moves it; it never closes a live link.
    adapter = reverse_adapter()
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with connect(
                url_of(adapter), additional_headers=implementation_headers(BOT_ID, TOKEN), proxy=None
            ) as ws:
                beat = heartbeat(100)
                for _ in range(16):  # 0.8 s of frames every 50 ms: more than two deadlines of 300 ms each
                    await ws.send(beat)
                    await anyio.sleep(0.05)
                assert ws.close_code is None
                await ws.wait_closed()  # then silence: closed after three intervals
    assert ws.close_code == 1001 and ws.close_reason == "no heartbeat"


async def test_replies_wait_for_the_account_in_order_and_the_waiting_room_is_bounded():
    adapter = reverse_adapter(outbox_size=2)
    peer = MockPeer()
    session = Session("qq", "dm", FRIEND_ID)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            async with peer.reverse_link(url_of(adapter), token=TOKEN):
                await adapter.wait_connected()
            await adapter.wait_until(lambda s: not s.accounts[BOT_ID])
            first = asyncio.ensure_future(adapter.send(session, MessageChain([Text("one")])))
            second = asyncio.ensure_future(adapter.send(session, MessageChain([Text("two")])))
            await adapter.wait_until(lambda s: s.waiting_sends == 2)
            third = await adapter.send(session, MessageChain([Text("three")]))
            async with peer.reverse_link(url_of(adapter), token=TOKEN):
                results = [await first, await second]
    assert not third.ok and "2 replies already wait for it (outbox_size)" in third.error
    assert all(r.ok for r in results)
    assert [c["message"][0]["data"]["text"] for c in peer.calls("send_msg")] == ["one", "two"]


async def test_stopping_the_adapter_reports_the_replies_still_waiting():
    adapter = reverse_adapter()
    async with running_bot(adapter, ScriptedProvider()):
        waiting = asyncio.ensure_future(adapter.send(Session("qq", "dm", FRIEND_ID), MessageChain([Text("late")])))
        with anyio.fail_after(10):
            await adapter.wait_until(lambda s: s.waiting_sends == 1)
    with anyio.fail_after(10):
        result = await waiting
    assert not result.ok and result.error == "the adapter is stopping"
    with pytest.raises(NotConnected):
        await adapter.call_action("get_status")


def gate_plugin() -> tuple[type[BasePlugin], asyncio.Event, asyncio.Event, list[str]]:
    """A plugin whose first `im_message` hook holds every message until `release` is set, then notes its text
    and stops it."""
    entered, release = asyncio.Event(), asyncio.Event()
    seen: list[str] = []

    class Gate(BasePlugin):
        @on.im_message(priority=Priority.SYS_HIGH + 10)
        async def hold(self, event: KiraMessageEvent, *args: Any, **kwargs: Any) -> None:
            entered.set()
            await release.wait()
            seen.append(event.message_str)
            event.stop()

    return Gate, entered, release, seen


@pytest.mark.parametrize("bound", [{"max_queued_events": 100}, {"max_queued_bytes": 30_000}])
async def test_a_flood_is_held_back_at_the_queue_bound_and_every_event_is_delivered(bound):
    """While the pipeline is stuck, the adapter stops reading at its bound (the implementation waits, TCP holds
    the frames); nothing is dropped, and every event is delivered, in order, once the pipeline moves."""
    flood = 3_000
    adapter = reverse_adapter(max_routes=50, **bound)
    peer = MockPeer()
    Gate, entered, release, seen = gate_plugin()
    async with running_bot(adapter, ScriptedProvider(), plugins=[Gate], deadlines={"hook_default": 300}):
        with anyio.fail_after(120):
            async with peer.reverse_link(url_of(adapter), token=TOKEN) as ws:
                await adapter.wait_connected()
                await ws.send(json.dumps(private_event(50_000, "m0")))
                await entered.wait()  # the pipeline is busy with the first event

                async def send_all() -> None:
                    for n in range(1, flood):
                        await ws.send(json.dumps(private_event(50_000 + n, f"m{n}", message_id=n)))

                async with anyio.create_task_group() as tg:
                    tg.start_soon(send_all)  # its sends block once TCP's buffers are full: that is the point
                    during = await adapter.wait_until(lambda s: s.pauses > 0)
                    await asyncio.sleep(0.5)  # the reader stays paused: the queue does not grow
                    still = adapter.stats()
                    release.set()
                    highest = 0

                    def done(s) -> bool:
                        nonlocal highest
                        highest = max(highest, s.queued_events)
                        return s.events_processed == flood

                    after = await adapter.wait_until(done)
    assert 90 <= still.queued_events <= bound.get("max_queued_events", 1000)
    assert still.queued_bytes <= bound.get("max_queued_bytes", 64 * 1024 * 1024) + 400  # passed by one frame at most
    assert still.queued_events == during.queued_events and still.events_processed == 0
    assert highest <= bound.get("max_queued_events", 1000)
    assert after.dropped_events == 0 and after.queued_events == 0 and after.routes == 50
    assert seen == [f"m{n}" for n in range(flood)]


async def test_events_read_past_the_bound_for_an_actions_answer_are_refused_with_a_notice():
    """An action waiting for its answer needs the reader: the events it must read past the full queue are
    refused, and each sender is told, quoting their refused messages; nothing is dropped silently. (A sender gets
    one notice per stretch of refusals: on a busy machine the reader can pause twice, so their notices add up.)"""
    users, each = 30, 5
    adapter = reverse_adapter(max_queued_events=100)
    peer = MockPeer()
    Gate, entered, release, seen = gate_plugin()
    async with running_bot(adapter, ScriptedProvider(), plugins=[Gate], deadlines={"hook_default": 300}):
        with anyio.fail_after(120):
            async with peer.reverse_link(url_of(adapter), token=TOKEN) as ws:
                await adapter.wait_connected()
                for n in range(each):
                    for u in range(users):
                        await ws.send(json.dumps(private_event(60_000 + u, f"u{u}m{n}", message_id=n * users + u)))
                await adapter.wait_until(lambda s: s.pauses > 0)
                await adapter.call_action("get_status")  # answered once every event before it was read
                refused = adapter.stats().dropped_events
                notices: dict[str, str] = {}
                while sum(text.count('"') // 2 for text in notices.values()) < refused:
                    params = await peer.next_sent()
                    user = str(params["user_id"])
                    notices[user] = notices.get(user, "") + "".join(seg["data"]["text"] for seg in params["message"])
                release.set()
                await adapter.wait_until(lambda s: s.events_processed == users * each - refused)
    assert refused > 0
    quoted = {m for text in notices.values() for m in re.findall(r'"(u\d+m\d+)"', text)}
    assert "too many messages are waiting" in next(iter(notices.values()))
    assert all(f"u{int(user) - 60_000}m" in text for user, text in notices.items())  # each to its own sender
    assert quoted.isdisjoint(seen) and quoted | set(seen) == {f"u{u}m{n}" for u in range(users) for n in range(each)}


async def test_a_port_in_use_is_a_clear_error_at_start():
    first = reverse_adapter()
    async with running_bot(first, ScriptedProvider()):
        taken = OneBotAdapter("qq2", mode="reverse", port=first.port)
        with pytest.raises(AdapterError, match=rf"adapter 'qq2' \(onebot\): cannot listen on 127.0.0.1:{first.port}"):
            async with running_bot(taken, ScriptedProvider()):
                pass
