"""KiraAI plugins do what they are written to do: small plugins in KiraAI's style (folders under tests/kira/plugins/)
call KiraAI's API exactly as KiraAI documents it, and each test asserts the effect a user would see (the history
really trimmed, the action really reached a OneBot peer, the model really read the replaced text)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import anyio
import pytest

from core.adapter.onebot import OneBotAdapter
from core.chat.message_elements import Image, Reply, Sticker, Text
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
            ["m3", "<msg>reply 3</msg>"],
            ["m4", "<msg>reply 4</msg>"],
        ]

        assert await bot.send("/condense") == []
        await bot.send("m5")
        assert [(m.role, m.content) for m in bot.requests[4].messages[:2]] == [
            ("user", "(summary of earlier chat)"),
            ("assistant", "the user said: m3 / m4"),
        ]
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
    provider = ScriptedProvider(
        [
            [ToolCall("set_card", {"group_id": GROUP_ID, "user_id": FRIEND_ID, "card": "Captain"})],
            [ToolCall("set_card", {"group_id": "999", "user_id": FRIEND_ID, "card": "Nobody"})],
            "<msg>done</msg>",
        ]
    )
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


async def test_the_model_reads_the_chain_as_the_message_hooks_left_it():
    provider = ScriptedProvider(["<msg>nice</msg>", "<msg>hm</msg>"])
    picture = Image(image="https://example.invalid/cat.png")

    async with ChatHarness([PLUGINS / "rewrite"], provider) as bot:
        await bot.send([Text("look "), picture])
        await bot.send([Reply("12345"), Text("you said this")])

    first, second = bot.requests
    assert str(first.user_prompt) == "look [图片]", "an Image replaced by Text in im_message"
    assert str(second.user_prompt) == "(forged quote) [Reply 12345]you said this", "annotated in im_batch_message"
    assert second.messages[0].content == "look [图片]", "history keeps what the model read"


async def test_assigning_event_session_reroutes_the_message_and_its_reply():
    async with ChatHarness([PLUGINS / "rewrite"], ScriptedProvider(["<msg>welcome</msg>"])) as bot:
        await bot.send("#lobby hello all")
        assert [r.session.sid for r in bot.adapter.sent] == ["test:gm:lobby"]
        assert len(await bot.app.history.list_turns("test:gm:lobby")) == 1
        assert await bot.app.history.list_turns(SID) == []


async def test_message_sent_and_tool_execute_get_the_shapes_kiraai_calls_them_with():
    provider = ScriptedProvider(
        [
            [ToolCall("where_am_i", {"prefix": "you are in"}), ToolCall("lookup", {"query": "hook"})],
            "<msg>found</msg>",
        ]
    )

    async with ChatHarness([PLUGINS / "shapes"], provider) as bot:
        await bot.send("where?")
        shapes = bot.plugin("kira_shapes")

    results = sorted(m.content for m in provider.requests[1].messages if m.role == "tool")
    assert results == ["hook: a word", f"you are in {SID}"], "execute(event, **args) got the event; execute(query) not"
    assert shapes.sent == [("found", True)], "message_sent(event, chain, result)"


async def test_handle_im_message_injects_a_synthetic_message_into_the_pipeline():
    async with ChatHarness([PLUGINS / "shapes"], ScriptedProvider(["<msg>hi relay</msg>"])) as bot:
        assert await bot.send("/relay hello from elsewhere") == []
        turn = bot.app.flush("test:dm:relay")  # the chat plugin buffered it like any incoming message
        assert turn is not None
        result = await turn

    assert [c.plain_text for c in result.chains] == ["hi relay"]
    assert str(bot.requests[0].user_prompt) == "hello from elsewhere"
    assert [r.session.sid for r in bot.adapter.sent] == ["test:dm:relay"]


KIRA_SECTIONS = [
    "role",
    "persona",
    "attention",
    "output",
    "format",
    "accounts",
    "sessions",
    "chat_env",
    "memory",
    "tools",
    "time",
]


async def test_a_plugin_finds_kiraais_sections_by_name_and_chat_env_describes_the_chat():
    async with ChatHarness([PLUGINS / "prompt"], ScriptedProvider(["<msg>ok</msg>"])) as bot:
        await bot.app.respond(bot.message("hi all", group_id="g7", user_id="u1", nickname="Alice", mentioned=True))
        rules = bot.plugin("kira_prompt")

    assert rules.names[: len(KIRA_SECTIONS)] == KIRA_SECTIONS
    env = rules.chat_env
    assert "`test`" in env and "GroupMessage" in env and "g7" in env and "Alice (id `u1`)" in env
    system = bot.requests[0].render_system()
    assert "- group rules: no spoilers" in system, "the edited section reached the model"
    assert system.index("Chat environment") < system.index("no spoilers") < system.index("Current time")


PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
)


def sticker_folder(data: Path) -> Path:
    folder = data / "sticker"
    folder.mkdir(parents=True)
    (folder / "cat.png").write_bytes(PNG)
    (folder / "dog.png").write_bytes(PNG)
    (folder / "stickers.json").write_text(
        json.dumps({"1": {"desc": "a happy cat", "path": "cat.png"}, "2": {"desc": "escape", "path": "../secret.png"}})
    )
    return folder


async def test_the_sticker_tag_sends_a_sticker_of_the_folder_and_an_unknown_id_as_text(tmp_path):
    folder = sticker_folder(tmp_path)
    provider = ScriptedProvider(
        ["<msg><sticker>1</sticker></msg><msg><sticker>99</sticker></msg><msg><sticker>2</sticker></msg>"]
    )

    async with ChatHarness(provider=provider, config={"data": {"dir": str(tmp_path)}}) as bot:
        chains = await bot.send("show me a cat")

    assert "[1] a happy cat" in bot.requests[0].render_system() and "[dog] dog" in bot.requests[0].render_system()
    (sticker,), (unknown,), (outside,) = chains
    assert isinstance(sticker, Sticker) and Path(sticker.path) == (folder / "cat.png").resolve()
    assert unknown == Text("99")
    assert outside == Text("2"), "an index entry that leaves the folder is not sent"


async def test_kiraai_module_paths_and_the_plugin_manager_do_what_kiraai_does(tmp_path, caplog):
    sticker_folder(tmp_path)
    provider = ScriptedProvider(
        [
            [ToolCall("plugins", {})],
            [ToolCall("switch_off", {"plugin_id": "kira_prompt"})],
            [ToolCall("add_sticker", {})],
            "<msg>done</msg>",
            "<msg>again</msg>",
        ]
    )
    caplog.set_level("INFO", logger="hookchat.kira_managers")

    async with ChatHarness(
        [PLUGINS / "managers", PLUGINS / "prompt"], provider, {"data": {"dir": str(tmp_path)}}
    ) as bot:
        managers = bot.plugin("kira_managers")
        assert managers.checks == {"persona model": True, "persona manager": True, "sticker manager": True}
        await bot.send("tidy up")
        prompt_hook_names = list(bot.plugin("kira_prompt").names) if bot.plugin("kira_prompt") else None
        await bot.send("and now?")

    assert "managers ready, persona default" in caplog.text, "core.logging_manager's logger reaches hookchat's log"
    tool_results = [m.content for m in provider.requests[3].messages if m.role == "tool"]
    assert "kira_managers=ready" in tool_results[0] and "kira_prompt=ready" in tool_results[0]
    assert tool_results[1] == "kira_prompt enabled: False" and prompt_hook_names is None
    assert bot.app.plugins.status("kira_prompt").state == "disabled"
    assert "[3] a sleepy dog" in provider.requests[4].render_system(), "the registered sticker is offered"


async def test_a_refused_name_raises_naming_itself_and_the_compatibility_page():
    async with ChatHarness([PLUGINS / "managers"], ScriptedProvider()) as bot:
        ctx = bot.plugin("kira_managers").ctx
        refused = [
            (lambda: ctx.adapter_mgr.delete_adapter("test"), "adapter_mgr.delete_adapter"),
            (lambda: ctx.tool_mgr.register_tool(None), "tool_mgr.register_tool"),
            (lambda: ctx.plugin_mgr.uninstall_plugin("kira_managers"), "plugin_mgr.uninstall_plugin"),
            (lambda: ctx.config.save_config(), "config.save_config"),
        ]
        for call, name in refused:
            with pytest.raises(NotSupportedHere, match=rf"not supported here: {name} \(.+\); see docs/kira-compat.md"):
                call()
        with pytest.raises(NotSupportedHere, match=r"sticker_manager.add_sticker .*docs/kira-compat.md"):
            await ctx.sticker_manager.add_sticker(b"", "x.png")
