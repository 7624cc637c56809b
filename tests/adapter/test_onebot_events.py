"""OneBot frames as typed models (ids as numbers or strings), which notices become messages, and notices through
a running bot: a poke at the bot is answered, a recall or a newcomer is not."""

from __future__ import annotations

import anyio
import pytest
from nonebot.adapters.onebot.v11.event import GroupMessageEvent, PrivateMessageEvent

from core.adapter.onebot import OneBotAdapter
from core.adapter.onebot._events import (
    ActionResponse,
    MalformedFrame,
    MessageEvent,
    MetaEvent,
    NoticeEvent,
    OtherEvent,
    notice_of,
    parse_frame,
)
from core.chat import MessageChain
from core.chat.message_elements import Notice, Poke
from core.testing import ScriptedProvider
from tests.adapter.conftest import recorder, running_bot
from tests.adapter.napcat import BOT_ID, FRIEND_ID, GROUP_ID, MockPeer
from tests.adapter.nonebot_models import expected_class, nonebot_event

pytestmark = pytest.mark.anyio

SELF = 10001


def message(**fields):
    return {
        "post_type": "message",
        "message_type": "private",
        "sub_type": "friend",
        "message_id": 1,
        "user_id": 2,
        "message": "hi",
        "raw_message": "hi",
        "font": 0,
        "sender": {"user_id": 2},
        "time": 1,
        "self_id": SELF,
        **fields,
    }


@pytest.mark.parametrize(
    "ids",
    [
        {"message_id": 5, "user_id": 2, "self_id": SELF},
        {"message_id": "5", "user_id": "2", "self_id": str(SELF)},
    ],
)
def test_ids_read_the_same_as_numbers_or_strings(ids):
    frame = parse_frame(message(**ids))
    assert isinstance(frame, MessageEvent)
    assert (frame.message_id, frame.user_id, frame.self_id) == ("5", "2", str(SELF))


def test_each_kind_of_frame_gets_its_model():
    assert isinstance(parse_frame({"status": "ok", "retcode": 0, "data": None, "echo": "1"}), ActionResponse)
    assert isinstance(
        parse_frame(
            {
                "post_type": "meta_event",
                "meta_event_type": "lifecycle",
                "sub_type": "connect",
                "time": 1,
                "self_id": SELF,
            }
        ),
        MetaEvent,
    )
    assert isinstance(parse_frame({"post_type": "request", "request_type": "friend", "self_id": SELF}), OtherEvent)


@pytest.mark.parametrize(
    ("fields", "group", "nonebot_class"),
    [
        ({"sub_type": "group", "group_id": 3}, "3", PrivateMessageEvent),  # NapCat names the group on the event
        ({"sub_type": "group", "sender": {"user_id": 2, "group_id": 3}}, "3", PrivateMessageEvent),  # go-cqhttp
        ({"sub_type": "friend"}, None, PrivateMessageEvent),
        ({"message_type": "group", "sub_type": "normal", "group_id": 3}, None, GroupMessageEvent),  # not temporary
    ],
)
def test_a_temporary_chat_names_the_group_it_came_from(fields, group, nonebot_class):
    frame = parse_frame(message(**fields))
    assert isinstance(frame, MessageEvent) and frame.temp_group == group
    assert type(nonebot_event(message(**fields))) is nonebot_class


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        ([1, 2], "a frame must be a JSON object, not list"),
        (
            {
                "post_type": "message",
                "message_type": "channel",
                "message_id": 1,
                "user_id": 2,
                "message": "",
                "self_id": 1,
            },
            "message_type: Input should be 'private' or 'group'",
        ),
        ({"post_type": "notice", "self_id": 1}, "notice frame: notice_type: Field required"),
        ({"retcode": 0}, "answer frame: status: Field required"),
    ],
)
def test_a_malformed_frame_says_what_is_wrong(data, reason):
    with pytest.raises(MalformedFrame, match=reason.replace("(", r"\(").replace(")", r"\)")):
        parse_frame(data)


NOTICES = [
    (
        {"notice_type": "notify", "sub_type": "poke", "group_id": 3, "user_id": 2, "target_id": SELF},
        "qq:gm:3",
        [Poke(str(SELF))],
        True,
    ),
    (
        {"notice_type": "notify", "sub_type": "poke", "user_id": 2, "target_id": SELF, "sender_id": 2},
        "qq:dm:2",
        [Poke(str(SELF))],
        True,
    ),
    (
        {"notice_type": "notify", "sub_type": "poke", "group_id": 3, "user_id": 2, "target_id": 4},
        "qq:gm:3",
        [Poke("4")],
        False,
    ),
    (
        {"notice_type": "group_recall", "group_id": 3, "user_id": 2, "operator_id": 5, "message_id": 77},
        "qq:gm:3",
        [Notice("5 recalled message 77", kind="group_recall")],
        False,
    ),
    (
        {"notice_type": "friend_recall", "user_id": 2, "message_id": 78},
        "qq:dm:2",
        [Notice("2 recalled message 78", kind="friend_recall")],
        False,
    ),
    (
        {"notice_type": "group_increase", "sub_type": "approve", "group_id": 3, "user_id": 6, "operator_id": 5},
        "qq:gm:3",
        [Notice("6 joined the group", kind="group_increase")],
        False,
    ),
]


@pytest.mark.parametrize(("fields", "sid", "chain", "to_me"), NOTICES, ids=lambda v: str(v)[:30])
def test_the_notices_hookchat_models_and_nonebot_agrees_on_their_class(fields, sid, chain, to_me):
    raw = {"post_type": "notice", "time": 1, "self_id": SELF, **fields}
    frame = parse_frame(raw)
    assert isinstance(frame, NoticeEvent)
    delivered = notice_of(frame, "qq", raw=raw)
    assert delivered is not None and delivered.is_notice
    assert (delivered.session.sid, delivered.chain, delivered.is_mentioned) == (sid, MessageChain(chain), to_me)
    assert type(nonebot_event(raw)) is expected_class(delivered)


@pytest.mark.parametrize(
    "fields",
    [
        {"notice_type": "notify", "sub_type": "poke", "user_id": SELF, "target_id": 2},  # the bot poked someone
        {"notice_type": "group_recall", "group_id": 3, "user_id": SELF, "operator_id": SELF, "message_id": 1},
        {"notice_type": "group_decrease", "sub_type": "leave", "group_id": 3, "user_id": 2, "operator_id": 2},
        {"notice_type": "group_upload", "group_id": 3, "user_id": 2, "file": {"id": "x"}},
    ],
)
def test_other_notices_and_the_bots_own_are_not_delivered(fields):
    raw = {"post_type": "notice", "time": 1, "self_id": SELF, **fields}
    assert notice_of(parse_frame(raw), "qq", raw=raw) is None


async def test_a_poke_at_the_bot_is_answered_and_a_recall_is_not(mock_peer: MockPeer):
    adapter = OneBotAdapter("qq", url=mock_peer.url)
    Recorder, inbox = recorder()
    provider = ScriptedProvider(["Ouch!"])
    async with running_bot(adapter, provider, plugins=[Recorder]):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            await mock_peer.server.inject_event(
                {
                    "post_type": "notice",
                    "notice_type": "friend_recall",
                    "user_id": int(FRIEND_ID),
                    "message_id": 5,
                    "time": 1,
                    "self_id": int(BOT_ID),
                }
            )
            await mock_peer.server.inject_event(
                {
                    "post_type": "notice",
                    "notice_type": "notify",
                    "sub_type": "poke",
                    "group_id": int(GROUP_ID),
                    "user_id": int(FRIEND_ID),
                    "target_id": int(BOT_ID),
                    "time": 1,
                    "self_id": int(BOT_ID),
                }
            )
            sent = await mock_peer.next_sent()
            recall, poke = await inbox.get(), await inbox.get()
    assert recall.is_notice and not recall.is_mentioned and recall.sid == f"qq:dm:{FRIEND_ID}"
    assert poke.is_notice and poke.is_mentioned and poke.sid == f"qq:gm:{GROUP_ID}"
    assert sent["group_id"] == int(GROUP_ID) and len(provider.requests) == 1
    assert "[Poke 123456789]" in provider.requests[0].user_prompt
