"""The adapter contract as `hookchat run` uses it: `onebot` is a built-in type, built from `[adapters]`, with its
options checked when it is built; and the string form of messages for implementations that want CQ codes."""

from __future__ import annotations

import anyio
import pytest

from core.adapter import AdapterError, adapter_class, build_adapters
from core.adapter.onebot import CAPABILITIES, OneBotAdapter
from core.chat import MessageChain, Session
from core.chat.message_elements import At, Poke, Text
from core.config import HookchatConfig
from core.testing import ScriptedProvider
from tests.adapter.conftest import running_bot
from tests.adapter.napcat import FRIEND_ID, GROUP_ID, MockPeer


def test_onebot_is_a_built_in_adapter_type_built_from_the_config(monkeypatch):
    monkeypatch.setenv("ONEBOT_TOKEN", "t")
    config = HookchatConfig.model_validate(
        {
            "adapters": {
                "console": False,
                "instances": [
                    {
                        "type": "onebot",
                        "name": "qq",
                        "options": {"url": "ws://127.0.0.1:3001", "token_env": "ONEBOT_TOKEN"},
                    },
                    {
                        "type": "onebot",
                        "name": "qq2",
                        "options": {"mode": "reverse", "port": 8081, "self_ids": [10001]},
                    },
                ],
            }
        }
    )
    first, second = build_adapters(config)
    assert isinstance(first, OneBotAdapter) and first.name == "qq" and first.settings.url == ["ws://127.0.0.1:3001"]
    assert second.name == "qq2" and second.settings.self_ids == ["10001"]
    assert first.capabilities == CAPABILITIES and "poke" in CAPABILITIES and "notice" not in CAPABILITIES
    with pytest.raises(AdapterError, match="unknown adapter type 'icq'; known types: console, discord, matrix, onebot"):
        adapter_class("icq")


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({}, "options: forward mode needs `url`"),
        ({"url": "http://127.0.0.1:3001"}, "options.url: 'http://127.0.0.1:3001' is not a ws:// or wss:// URL"),
        ({"url": "ws://x", "timeout": 3}, "options.timeout: unknown option"),
        ({"mode": "reverse", "url": "ws://x"}, "`url` is for forward mode"),
        ({"url": "ws://x", "outbox_size": 0}, "options.outbox_size: Input should be greater than 0"),
        (
            {"url": "ws://x", "token_env": "HOOKCHAT_TEST_UNSET_TOKEN"},
            "token_env names HOOKCHAT_TEST_UNSET_TOKEN, which is not set",
        ),
    ],
)
def test_bad_options_are_refused_when_the_adapter_is_built(options, message, monkeypatch):
    monkeypatch.delenv("HOOKCHAT_TEST_UNSET_TOKEN", raising=False)
    with pytest.raises(AdapterError) as refused:
        OneBotAdapter("qq", **options)
    assert str(refused.value).startswith("adapter 'qq' (onebot): ")
    assert message in str(refused.value)


@pytest.mark.anyio
async def test_the_string_form_sends_cq_codes(mock_peer: MockPeer):
    adapter = OneBotAdapter("qq", url=mock_peer.url, message_format="string")
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            result = await adapter.send(
                Session("qq", "gm", GROUP_ID), MessageChain([At(FRIEND_ID), Text(" [see] a&b, c")])
            )
            sent = await mock_peer.next_sent()
    assert result.ok
    assert sent["message"] == f"[CQ:at,qq={FRIEND_ID}] &#91;see&#93; a&amp;b, c"


@pytest.mark.anyio
async def test_a_poke_is_sent_as_the_poke_action_of_its_chat(mock_peer: MockPeer):
    adapter = OneBotAdapter("qq", url=mock_peer.url)
    async with running_bot(adapter, ScriptedProvider()):
        with anyio.fail_after(10):
            await adapter.wait_connected()
            in_group = await adapter.send(Session("qq", "gm", GROUP_ID), MessageChain([Poke(FRIEND_ID)]))
            in_private = await adapter.send(
                Session("qq", "dm", FRIEND_ID), MessageChain([Text("hey"), Poke(FRIEND_ID)])
            )
    assert in_group.ok and in_group.message_id == "" and in_private.ok and in_private.message_id
    assert mock_peer.calls("group_poke") == [{"group_id": int(GROUP_ID), "user_id": int(FRIEND_ID)}]
    assert mock_peer.calls("friend_poke") == [{"user_id": int(FRIEND_ID)}]
