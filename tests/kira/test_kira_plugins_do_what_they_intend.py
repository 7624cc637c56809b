"""KiraAI plugins do what they are written to do: small plugins in KiraAI's style (folders under tests/kira/plugins/)
call KiraAI's API exactly as KiraAI documents it, and each test asserts the effect a user would see (the history
really trimmed, the action really reached a OneBot peer, the model really read the replaced text)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import anyio
import pytest

from core.adapter.onebot import OneBotAdapter
from core.plugin import NotSupportedHere
from core.testing import ChatHarness, ScriptedProvider, ToolCall
from tests.adapter.conftest import running_bot
from tests.adapter.napcat import FRIEND_ID, GROUP_ID, MockPeer

pytestmark = pytest.mark.anyio

PLUGINS = Path(__file__).parent / "plugins"
SID = "test:dm:user"


def user_texts(request) -> list[str]:
    """What the user said, as the model read it: the history's user messages, then this turn's."""
    return [m.content for m in request.messages if m.role == "user"] + [str(request.user_prompt)]


async def test_plain_session_manager_calls_trim_condense_count_and_delete_history():
    provider = ScriptedProvider([f"<msg>reply {n}</msg>" for n in range(1, 7)])

    async with ChatHarness([PLUGINS / "history"], provider) as bot:
        keeper = bot.plugin("kira_history")
        for n in range(1, 5):
            await bot.send(f"m{n}")
        assert user_texts(bot.requests[3]) == ["m2", "m3", "m4"], "the model read the trimmed history"
        assert [[m.content for m in t.messages] for t in await bot.app.history.list_turns(SID)] == [
            ["m3", "<msg>reply 3</msg>"], ["m4", "<msg>reply 4</msg>"]]

        assert await bot.send("/condense") == []
        await bot.send("m5")
        assert [(m.role, m.content) for m in bot.requests[4].messages[:2]] == [
            ("user", "(summary of earlier chat)"), ("assistant", "the user said: m3 / m4")]
        assert user_texts(bot.requests[4]) == ["(summary of earlier chat)", "m5"]

        await bot.send("/count")
        assert keeper.counts_from_thread == [2], "a plain call from another thread works too"

        await bot.send("/forget")
        assert await bot.app.history.list_turns(SID) == []
        await bot.send("m6")
        assert user_texts(bot.requests[5]) == ["m6"]


async def test_session_manager_answers_plainly_outside_the_loop_and_when_awaited():
    async with ChatHarness([PLUGINS / "history"], ScriptedProvider(["<msg>one</msg>"])) as bot:
        sessions = bot.plugin("kira_history").ctx.session_mgr
        await bot.send("first")

        memory = sessions.read_memory(SID)
        assert memory == [[{"role": "user", "content": "first"}, {"role": "assistant", "content": "<msg>one</msg>"}]]
        assert await sessions.read_memory(SID) == memory, "still awaitable for code written that way"
        assert sessions.get_memory_count(SID) == 1 and await sessions.get_memory_count(SID) == 1
        assert sessions.fetch_memory(SID)[1] == {"role": "assistant", "content": "<msg>one</msg>"}
        assert [s.sid for s in sessions.get_session_info()] == [SID]
        assert sessions.get_existing_memory_snapshot("test:dm:nobody") is None

        # no running loop in this thread: as a KiraAI plugin's worker thread would call it
        count = await asyncio.to_thread(sessions.get_memory_count, SID)
        assert count == 1
        await sessions.update_memory(SID, [{"role": "user", "content": "x"}])
        assert sessions.get_memory_count(SID) == 2

        with pytest.raises(ValueError, match="not an OpenAI chat message"):
            sessions.write_memory(SID, [[{"role": "nobody", "content": "x"}]])
        assert sessions.get_memory_count(SID) == 2, "bad input lost nothing"


async def test_napcat_client_from_get_client_carries_the_plugins_action_to_the_onebot_peer():
    peer = MockPeer()
    await peer.start()
    adapter = OneBotAdapter("qq", url=peer.url, reconnect_initial=0.01, reconnect_max=0.05)
    provider = ScriptedProvider([
        [ToolCall("set_card", {"group_id": GROUP_ID, "user_id": FRIEND_ID, "card": "Captain"})],
        [ToolCall("set_card", {"group_id": "999", "user_id": FRIEND_ID, "card": "Nobody"})],
        "<msg>done</msg>",
    ])
    try:
        async with running_bot(adapter, provider, plugins=[PLUGINS / "qq"]):
            with anyio.fail_after(10):
                await adapter.wait_connected()
                await peer.server.inject_private_message(FRIEND_ID, "call me Captain in our group")
                await peer.next_sent()
    finally:
        await peer.stop()

    assert peer.calls("set_group_card") == [{"group_id": int(GROUP_ID), "user_id": int(FRIEND_ID), "card": "Captain"}]
    assert provider.requests[1].messages[-1].content == "好友1 is now Captain", "the peer's answer, read back"
    failed = provider.requests[2].messages[-1].content
    assert failed.startswith("failed: ") and len(failed) > len("failed: "), "a failed action is answered, not raised"
    assert len(peer.calls("get_group_member_info")) == 2


async def test_get_client_of_an_adapter_without_a_platform_client_names_the_method_and_the_page():
    async with ChatHarness([PLUGINS / "qq"], ScriptedProvider()) as bot:
        adapter = bot.plugin("kira_qq").ctx.adapter_mgr.get_adapter("test")
        with pytest.raises(NotSupportedHere, match=r"adapter.get_client.*RecordingAdapter.*kira-compat.md"):
            adapter.get_client()
