"""Text is valid at every boundary: a lone surrogate (`\\ud83d`, half an emoji) from the user, the model, a hidden
`<think>`, a stream or a tool name never breaks a turn; the reply is sent, the turn is stored, the console prints."""

from __future__ import annotations

import io

import pytest

from core.adapter.console import ConsoleAdapter
from core.chat import MessageChain
from core.chat.message_elements import Text
from core.chat.session import Session
from core.provider import LLMResponse, ToolCall
from core.testing import ChatHarness, ScriptedProvider
from core.utils.text import valid_text

pytestmark = pytest.mark.anyio

LONE = "\ud83d"  # the first half of 😀 (\ud83d\ude00) without its second


async def _stored(bot: ChatHarness) -> list:
    return await bot.app.history.get_history("test:dm:user")


@pytest.mark.parametrize("chunk_size", [None, 3], ids=["whole", "streamed"])
async def test_a_lone_surrogate_in_the_models_output_is_replaced_and_the_turn_stored(chunk_size) -> None:
    output = f"<think>plan {LONE}</think><msg>hi {LONE} there</msg>"
    async with ChatHarness(provider=ScriptedProvider([output], chunk_size=chunk_size)) as bot:
        replies = await bot.send("hello")
        stored = await _stored(bot)

    assert [c.message_repr for c in replies] == ["hi \ufffd there"]
    assert [m.role for m in stored] == ["user", "assistant"]
    assert LONE not in stored[1].content and "\ufffd" in stored[1].content


async def test_an_emoji_split_across_stream_chunks_arrives_whole_and_is_stored() -> None:
    async with ChatHarness(provider=ScriptedProvider(["<msg>a😀b</msg>"], chunk_size=1)) as bot:
        # chunk_size counts code points; a provider that splits UTF-16 halves is what the parser joins
        replies = await bot.send("hello")
        stored = await _stored(bot)

    assert [c.message_repr for c in replies] == ["a😀b"]
    assert "a😀b" in stored[1].content


async def test_a_lone_surrogate_from_the_user_is_replaced_and_the_turn_stored() -> None:
    async with ChatHarness(provider=ScriptedProvider(["<msg>ok</msg>"])) as bot:
        replies = await bot.send(f"broken {LONE} emoji", nickname=f"name{LONE}")
        stored = await _stored(bot)

    assert [c.message_repr for c in replies] == ["ok"]
    assert stored[0].content == "broken \ufffd emoji"


async def test_a_lone_surrogate_in_a_tool_name_is_an_error_result_and_the_turn_stored() -> None:
    step = LLMResponse(tool_calls=[ToolCall(f"search{LONE}", {"q": f"x{LONE}"})])
    async with ChatHarness(provider=ScriptedProvider([step, "<msg>done</msg>"])) as bot:
        replies = await bot.send("search")
        stored = await _stored(bot)

    assert [c.message_repr for c in replies] == ["done"]
    assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
    assert "no tool called 'search\ufffd'" in stored[2].content


async def test_the_console_never_dies_on_an_unencodable_character() -> None:
    out = io.TextIOWrapper(io.BytesIO(), encoding="ascii")
    console = ConsoleAdapter(out=out)

    result = await console.send(Session("console", "dm", "you"), MessageChain([Text(f"smile 😀 {LONE}")]))

    out.flush()
    assert result.ok
    assert out.buffer.getvalue() == b"bot> smile ? ?\n"


def test_valid_text_joins_pairs_and_replaces_lone_halves() -> None:
    assert valid_text("\ud83d\ude00") == "😀"
    assert valid_text(f"a{LONE}b") == "a\ufffdb"
    plain = "plain text"
    assert valid_text(plain) is plain
