"""The OneBot adapter in forward mode against NapCat's mock (ncatbot5), a OneBot implementation we did not write:
messages in, replies out through `send_msg`, "to me", the bot's own messages, actions, faults and reconnects."""

from __future__ import annotations

import json
import logging

import anyio
import pytest
import websockets
from websockets.asyncio.server import serve

from core.adapter.onebot import ActionFailed, OneBotAdapter
from core.chat import Group, MessageChain, Session
from core.chat.message_elements import At, Record, Reply, Text
from core.testing import ScriptedProvider
from core.utils.backoff import backoff_delay
from tests.adapter.conftest import GatedProvider, recorder, running_bot
from tests.adapter.napcat import BOT_ID, FRIEND_ID, GROUP_ID, MockPeer

pytestmark = pytest.mark.anyio

FAST = {"reconnect_initial": 0.01, "reconnect_max": 0.05}


def adapter_for(peer: MockPeer, **options) -> OneBotAdapter:
    return OneBotAdapter("qq", url=peer.url, **{**FAST, **options})


async def test_a_private_message_is_answered_with_send_msg(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["Hello!"]), plugins=[Recorder]):
        with anyio.fail_after(10):
            assert await adapter.wait_connected() == BOT_ID  # from the mock's lifecycle event
            await mock_peer.server.inject_private_message(FRIEND_ID, "hello bot", message_id="777")
            event = await inbox.get()
            sent = await mock_peer.next_sent()
    message = event.message
    assert event.sid == f"qq:dm:{FRIEND_ID}" and message.session == Session("qq", "dm", FRIEND_ID)
    assert message.message_id == "777" and message.sender.user_id == FRIEND_ID and message.self_id == BOT_ID
    assert message.is_mentioned and not message.is_notice  # a private chat is always "to me"
    assert message.chain == MessageChain([Text("hello bot")])
    assert sent == {
        "message_type": "private",
        "user_id": int(FRIEND_ID),
        "message": [{"type": "text", "data": {"text": "Hello!"}}],
    }
    history = mock_peer.server.get_call_history()
    assert [call["action"] for call in history] == ["get_login_info", "send_msg"]
    assert len({call["echo"] for call in history}) == 2 and all(isinstance(c["echo"], str) for c in history)


async def test_in_a_group_only_a_message_to_the_bot_gets_a_turn(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    Recorder, inbox = recorder()
    provider = ScriptedProvider(["Yes?"])
    async with running_bot(adapter, provider, plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_group_message(GROUP_ID, FRIEND_ID, "chatting among ourselves")
            await mock_peer.server.inject_group_message(
                GROUP_ID,
                FRIEND_ID,
                [{"type": "at", "data": {"qq": BOT_ID}}, {"type": "text", "data": {"text": " are you there?"}}],
            )
            sent = await mock_peer.next_sent()
            aside, to_bot = await inbox.get(), await inbox.get()
    assert aside.sid == to_bot.sid == f"qq:gm:{GROUP_ID}" and to_bot.group.group_id == GROUP_ID
    assert not aside.is_mentioned and to_bot.is_mentioned
    assert to_bot.message.chain == MessageChain([At(BOT_ID), Text(" are you there?")])
    assert to_bot.message.sender.nickname == "好友1"  # the mock's member name
    assert sent["message_type"] == "group" and sent["group_id"] == int(GROUP_ID)
    assert len(provider.requests) == 1  # the aside was discarded by the chat plugin's group policy


async def test_a_reply_to_the_bot_is_to_me_whether_or_not_this_run_sent_it(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    Recorder, inbox = recorder()
    database = mock_peer.server.database
    earlier_by_bot = database.send_group_message(GROUP_ID, [{"type": "text", "data": {"text": "old"}}])
    by_friend = database.send_group_message(GROUP_ID, [{"type": "text", "data": {"text": "x"}}], user_id=FRIEND_ID)
    async with running_bot(adapter, ScriptedProvider(["First.", "Quoted.", "Looked up."]), plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            session = Session("qq", "gm", GROUP_ID)
            receipt = await adapter.send(session, MessageChain([Text("sent in this run")]))
            for quoted in (receipt.message_id, earlier_by_bot, by_friend):
                await mock_peer.server.inject_group_message(
                    GROUP_ID,
                    FRIEND_ID,
                    [{"type": "reply", "data": {"id": quoted}}, {"type": "text", "data": {"text": "this one"}}],
                )
            events = [await inbox.get() for _ in range(3)]
    assert receipt.ok and receipt.message_id  # the platform's id, from send_msg's answer
    assert [e.is_mentioned for e in events] == [True, True, False]
    assert events[1].message.chain[0] == Reply(earlier_by_bot)
    assert mock_peer.calls("get_msg") == [{"message_id": int(earlier_by_bot)}, {"message_id": int(by_friend)}]


async def test_the_bots_own_messages_never_start_a_turn(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    provider = ScriptedProvider(["Only this."])
    async with running_bot(adapter, provider):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_private_message(BOT_ID, "echo of myself")
            await mock_peer.server.inject_event(
                {
                    "post_type": "message_sent",
                    "message_type": "private",
                    "sub_type": "friend",
                    "message_id": 9,
                    "user_id": int(BOT_ID),
                    "target_id": int(FRIEND_ID),
                    "message": "sent from the phone",
                    "raw_message": "sent from the phone",
                    "font": 0,
                    "sender": {"user_id": int(BOT_ID)},
                    "time": 1,
                    "self_id": int(BOT_ID),
                }
            )
            await mock_peer.server.inject_private_message(FRIEND_ID, "a real question")
            await mock_peer.next_sent()
    assert len(provider.requests) == 1
    assert provider.requests[0].user_prompt == "a real question"


async def test_a_refused_send_reports_the_platforms_words_and_logs_session_and_action(mock_peer: MockPeer, caplog):
    adapter = adapter_for(mock_peer)
    mock_peer.server.set_response(
        "send_msg",
        {"status": "failed", "retcode": 1200, "data": None, "message": "禁言中", "wording": "the bot is muted"},
    )
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            with caplog.at_level(logging.WARNING, "hookchat.adapter.onebot"):
                result = await adapter.send(Session("qq", "gm", GROUP_ID), MessageChain([Text("hi")]))
    assert not result.ok and not result.message_id
    assert result.error == "send_msg failed (retcode 1200): the bot is muted"
    assert f"send_msg to qq:gm:{GROUP_ID} failed" in caplog.text and "retcode 1200" in caplog.text


async def test_actions_by_name_and_a_recall_by_the_receipts_id(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    async with running_bot(adapter, ScriptedProvider()) as app:
        with anyio.fail_after(10):
            await adapter.wait_connected()
            assert (await adapter.get_login_info())["user_id"] == BOT_ID
            groups = await adapter.call_action("get_group_list")
            # `name` is an ordinary parameter: the action's name is positional-only
            await adapter.call_action("upload_group_file", group_id=int(GROUP_ID), file="base64://aGk=", name="a.txt")
            receipt = await app.send(Session("qq", "dm", FRIEND_ID), MessageChain([Text("oops")]))
            assert (await adapter.get_msg(receipt.message_id))["message"] == [
                {"type": "text", "data": {"text": "oops"}}
            ]
            await adapter.delete_msg(receipt.message_id)
            with pytest.raises(ActionFailed) as failed:
                await adapter.get_msg(receipt.message_id)
    assert GROUP_ID in {str(g["group_id"]) for g in groups}
    assert mock_peer.calls("upload_group_file")[0]["name"] == "a.txt"
    assert mock_peer.calls("delete_msg") == [{"message_id": int(receipt.message_id)}]
    assert failed.value.retcode == -1 and failed.value.wording == "消息不存在"


async def test_the_peer_dies_mid_turn_and_the_reply_goes_out_after_it_restarts(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    provider = GatedProvider(["Sorry for the wait."])
    async with running_bot(adapter, provider):
        with anyio.fail_after(20):
            await adapter.wait_connected()
            await mock_peer.server.inject_private_message(FRIEND_ID, "are you there?")
            await provider.called.wait()  # the turn is running: the model is thinking
            await mock_peer.stop()
            await adapter.wait_until(lambda s: not s.accounts[BOT_ID])
            provider.gate.set()  # the reply is produced while the peer is down...
            await adapter.wait_until(lambda s: s.waiting_sends == 1)  # ...and waits for a connection
            await mock_peer.start()
            sent = await mock_peer.next_sent()
            stats = await adapter.wait_until(lambda s: s.waiting_sends == 0)
    assert sent["message"] == [{"type": "text", "data": {"text": "Sorry for the wait."}}]
    assert stats.connections_made == 2


async def test_a_reply_that_cannot_wait_longer_is_reported_as_failed(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer, offline_send_timeout=0.1)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.stop()
            result = await adapter.send(Session("qq", "dm", FRIEND_ID), MessageChain([Text("anyone?")]))
    assert not result.ok
    assert result.error == f"bot account {BOT_ID} was not connected in time to send (offline_send_timeout)"
    assert adapter.stats().waiting_sends == 0


async def test_an_oversized_frame_is_refused_and_the_adapter_reconnects(mock_peer: MockPeer, caplog):
    adapter = adapter_for(mock_peer, max_frame_bytes=4096)
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["Still here."]), plugins=[Recorder]):
        with anyio.fail_after(10), caplog.at_level(logging.WARNING, "hookchat.adapter.onebot"):
            await adapter.wait_connected()
            await mock_peer.server.inject_private_message(FRIEND_ID, "x" * 10_000)
            await adapter.wait_until(lambda s: s.connections_made == 2 and s.accounts[BOT_ID])
            await mock_peer.server.inject_private_message(FRIEND_ID, "small")
            event = await inbox.get()
            await mock_peer.next_sent()
    assert event.message.chain.plain_text == "small"  # the big one never reached the pipeline
    assert "larger than max_frame_bytes" in caplog.text


async def test_a_frame_that_is_not_a_valid_event_is_logged_and_skipped(mock_peer: MockPeer, caplog):
    adapter = adapter_for(mock_peer)
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(["ok"]), plugins=[Recorder]):
        with anyio.fail_after(10), caplog.at_level(logging.WARNING, "hookchat.adapter.onebot"):
            await adapter.wait_connected()
            await mock_peer.server.inject_event({"post_type": "message", "message_type": "private"})
            await mock_peer.server.inject_private_message(FRIEND_ID, "valid")
            event = await inbox.get()
    assert event.message.chain.plain_text == "valid"
    assert adapter.stats().malformed_frames == 1
    assert "skipped a malformed frame" in caplog.text and "message_id: Field required" in caplog.text


@pytest.mark.parametrize("token_in", ["header", "query"])
async def test_the_access_token_goes_in_the_header_or_the_query(mock_peer: MockPeer, token_in: str, monkeypatch):
    monkeypatch.setenv("ONEBOT_TEST_TOKEN", "s3cret")
    seen = []

    async def gatekeeper(ws):  # our own front door, then the mock's protocol logic on the same connection
        seen.append((ws.request.headers.get("Authorization"), ws.request.path))
        await mock_peer.server._handle_connection(ws)

    async with serve(gatekeeper, "127.0.0.1", 0) as front:
        port = front.sockets[0].getsockname()[1]
        adapter = OneBotAdapter(
            "qq", url=f"ws://127.0.0.1:{port}/", token_env="ONEBOT_TEST_TOKEN", token_in=token_in, **FAST
        )
        async with running_bot(adapter, ScriptedProvider()):
            with anyio.fail_after(10):
                await adapter.wait_connected()
    expected = ("Bearer s3cret", "/") if token_in == "header" else (None, "/?access_token=s3cret")
    assert seen[0] == expected


async def test_an_implementation_that_is_down_at_start_is_dialled_until_it_is_up():
    peer = MockPeer()
    await peer.start()
    await peer.stop()  # a known free port with nobody listening
    adapter = adapter_for(peer)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            await peer.start()
            assert await adapter.wait_connected() == BOT_ID
    await peer.stop()
    assert websockets  # the adapter's own dependency, imported by the test for its server


def test_the_backoff_doubles_up_to_its_ceiling_with_jitter():
    delays = [[backoff_delay(failures, 1.0, 60.0) for _ in range(200)] for failures in range(8)]
    for failures, sample in enumerate(delays):
        ceiling = min(60.0, 2.0**failures)
        assert all(ceiling / 2 <= d <= ceiling for d in sample)
        assert len(set(sample)) > 1  # jittered: bots restarting together do not reconnect in step
    assert max(delays[7]) <= 60.0 and backoff_delay(10_000, 1.0, 60.0) <= 60.0


async def test_the_account_is_named_by_the_lifecycle_event_or_else_by_get_login_info():
    async def lifecycle_only(ws):  # names itself, then never answers an action
        await ws.send(
            json.dumps(
                {
                    "post_type": "meta_event",
                    "meta_event_type": "lifecycle",
                    "sub_type": "connect",
                    "time": 1,
                    "self_id": 555,
                }
            )
        )
        await ws.wait_closed()

    async def login_info_only(ws):  # no lifecycle event: the adapter has to ask
        async for frame in ws:
            call = json.loads(frame)
            await ws.send(
                json.dumps(
                    {"status": "ok", "retcode": 0, "echo": call["echo"], "data": {"user_id": 777, "nickname": "Quiet"}}
                )
            )

    for handler, expected in ((lifecycle_only, "555"), (login_info_only, "777")):
        async with serve(handler, "127.0.0.1", 0) as implementation:
            port = implementation.sockets[0].getsockname()[1]
            adapter = OneBotAdapter("qq", url=f"ws://127.0.0.1:{port}", **FAST)
            async with running_bot(adapter, ScriptedProvider()):
                with anyio.fail_after(10):
                    assert await adapter.wait_connected() == expected


async def test_several_urls_serve_several_accounts_and_each_answers_its_own_sessions():
    first, second = MockPeer("111"), MockPeer("222")
    await first.start()
    await second.start()
    try:
        adapter = OneBotAdapter("qq", url=[first.url, second.url], **FAST)
        async with running_bot(adapter, ScriptedProvider(["one", "two"])):
            with anyio.fail_after(10):
                await adapter.wait_until(lambda s: s.accounts == {"111": True, "222": True})
                await second.server.inject_private_message(FRIEND_ID, "to 222")
                to_second = await second.next_sent()
                await first.server.inject_group_message(GROUP_ID, FRIEND_ID, [{"type": "at", "data": {"qq": "111"}}])
                to_first = await first.next_sent()
    finally:
        await first.stop()
        await second.stop()
    assert to_second["user_id"] == int(FRIEND_ID) and to_first["group_id"] == int(GROUP_ID)
    assert first.calls("send_msg") == [to_first] and second.calls("send_msg") == [to_second]


async def two_group_messages(adapter, mock_peer: MockPeer):
    """The events of two messages the mock injects into one group, as the bot's hooks received them."""
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(), plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_group_message(GROUP_ID, FRIEND_ID, "first")
            await mock_peer.server.inject_group_message(GROUP_ID, FRIEND_ID, "second")
            return await inbox.get(), await inbox.get()


async def test_a_group_is_named_by_get_group_info_once_for_all_its_messages(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    first, second = await two_group_messages(adapter, mock_peer)
    assert first.message.group.name == second.message.group.name == "测试群1"  # the mock's name for the group
    assert mock_peer.calls("get_group_info") == [{"group_id": int(GROUP_ID)}]  # remembered: asked once
    assert adapter.stats().group_names == 1


async def test_a_group_the_implementation_cannot_name_stays_unnamed_and_is_not_asked_each_time(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    mock_peer.server.set_response(
        "get_group_info", {"status": "failed", "retcode": 100, "data": None, "message": "", "wording": "unsupported"}
    )
    first, second = await two_group_messages(adapter, mock_peer)
    assert first.message.group.name == second.message.group.name == ""
    assert len(mock_peer.calls("get_group_info")) == 1  # the failure is remembered for a while too


async def test_group_names_are_not_asked_for_when_group_info_timeout_is_0(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer, group_info_timeout=0)
    Recorder, inbox = recorder()
    async with running_bot(adapter, ScriptedProvider(), plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_group_message(GROUP_ID, FRIEND_ID, "hello")
            event = await inbox.get()
    assert event.message.group == Group(GROUP_ID) and mock_peer.calls("get_group_info") == []


async def test_a_send_qq_takes_as_two_messages_carries_both_ids_and_a_recall_deletes_both(mock_peer: MockPeer):
    adapter = adapter_for(mock_peer)
    async with running_bot(adapter, ScriptedProvider()) as app:
        with anyio.fail_after(10):
            await adapter.wait_connected()
            receipt = await app.send(
                Session("qq", "dm", FRIEND_ID), MessageChain([Text("listen:"), Record(url="https://example.com/a.mp3")])
            )
            await adapter.recall(receipt)
            for message_id in receipt.message_ids:
                with pytest.raises(ActionFailed):
                    await adapter.get_msg(message_id)
    assert [call["message"][0]["type"] for call in mock_peer.calls("send_msg")] == ["text", "record"]
    assert receipt.ok and len(set(receipt.message_ids)) == 2 and receipt.message_id == receipt.message_ids[0]
    assert mock_peer.calls("delete_msg") == [{"message_id": int(i)} for i in receipt.message_ids]


async def test_a_reply_in_a_temporary_chat_names_the_group_it_came_from(mock_peer: MockPeer):
    # A temporary chat (someone who is no friend writes from a group): OneBot v11 says only `sub_type: group`;
    # NapCat puts the group on the event (go-cqhttp on the sender), and sending back needs it as `group_id`.
    adapter = adapter_for(mock_peer)
    Recorder, inbox = recorder()
    stranger = "300001"
    async with running_bot(adapter, ScriptedProvider(["Hi, stranger.", "Hi, friend."]), plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_event(
                {
                    "post_type": "message",
                    "message_type": "private",
                    "sub_type": "group",
                    "message_id": 31,
                    "user_id": int(stranger),
                    "group_id": int(GROUP_ID),
                    "temp_source": 0,
                    "message": [{"type": "text", "data": {"text": "hello from the group"}}],
                    "raw_message": "hello from the group",
                    "font": 0,
                    "sender": {"user_id": int(stranger), "nickname": "someone"},
                    "time": 1,
                    "self_id": int(BOT_ID),
                }
            )
            temporary = await inbox.get()
            to_temporary = await mock_peer.next_sent()
            await mock_peer.server.inject_private_message(stranger, "now we are friends")
            await inbox.get()
            to_friend = await mock_peer.next_sent()
    assert temporary.sid == f"qq:dm:{stranger}" and temporary.message.group is None  # still a private chat
    assert to_temporary == {
        "message_type": "private",
        "user_id": int(stranger),
        "group_id": int(GROUP_ID),
        "message": [{"type": "text", "data": {"text": "Hi, stranger."}}],
    }
    assert "group_id" not in to_friend and adapter.stats().temporary_chats == 0
