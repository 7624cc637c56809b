"""The compatibility suite: small plugins written in KiraAI's style (folders under tests/kira/plugins/), each using a
group of KiraAI's plugin API, loaded from their folders by the real loader and driven through the testing kit."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.chat import MessageChain
from core.chat.message_elements import At, Image, Text
from core.plugin import BasePlugin, on, web_declarations
from core.testing import ChatHarness, ScriptedProvider, ToolCall

pytestmark = pytest.mark.anyio

PLUGINS = Path(__file__).parent / "plugins"


async def test_context_plugin_reads_the_app_config_asks_the_model_and_finds_another_plugin():
    provider = ScriptedProvider([[ToolCall("ask_model", {"question": "what is 2+2?"})], "4", "<msg>It is 4.</msg>"])
    config = {"plugins": {"config": {"chat": {"flush_messages": 3}}}, "kira": {"locale": {"lang": "zh"}}}

    async with ChatHarness([PLUGINS / "context", PLUGINS / "web"], provider, config) as bot:
        probe = bot.plugin("kira_context")
        assert probe.max_buffer == 3, "bot_config.bot.max_buffer_messages is the chat plugin's flush_messages"
        assert probe.max_tool_loop == bot.app.config.limits.max_steps
        assert probe.greeting == "hi" and probe.lang == "zh"
        assert probe.partner() is bot.plugin("kira_web")
        import_time_path = __import__(type(probe).__module__, fromlist=["DATA_AT_IMPORT"]).DATA_AT_IMPORT
        assert import_time_path == Path(bot.app.config.data.dir).resolve()

        chains = await bot.send("ask the model")

    assert [c.plain_text for c in chains] == ["It is 4."]
    side = bot.requests[1]
    assert side.to_openai_messages() == [{"role": "user", "content": "what is 2+2?"}], "no hooks, no history"
    tool_message = bot.requests[2].messages[-1]
    assert tool_message.role == "tool" and tool_message.content == "side answer: 4"


async def test_unicode_id_plugin_rewrites_what_the_model_reads_and_keeps_request_only_parts_out_of_history():
    provider = ScriptedProvider(["<msg>one</msg>", "<msg>two</msg>"])

    async with ChatHarness([PLUGINS / "messages"], provider) as bot:
        status = bot.app.plugins.status("default-chat（z）")
        assert status is not None and status.state == "loaded", status
        plugin = bot.plugin("default-chat（z）")
        assert plugin.plugin_id == "default-chat（z）"
        assert type(plugin).__module__.isascii() and type(plugin).__module__.replace(".", "").replace("_", "").isalnum()

        await bot.send("hello")
        await bot.send("again")

    assert plugin.seen[0] == {"group": False, "self_id": "", "notice": False, "adapter": "test"}
    assert plugin.batch_seen == ["hello", "again"]
    first, second = bot.requests
    assert first.user_prompt == "(via test) hello\n[only for this request]"
    assert [m.content for m in second.messages if m.role == "user"] == ["(via test) hello"], "persist=False stays out"
    assert plugin.dynamic_sections == ["sessions", "chat_env", "time"], "KiraAI's dynamic sections, in its order"


class SeedStyleShout(BasePlugin):
    """A seed-003 after_xml_parse hook beside the KiraAI-style one: each sees the shape it was written for."""

    async def initialize(self):
        self.calls = []

    @on.after_xml_parse()
    async def shout(self, event, chain: MessageChain, *args, **kwargs):
        self.calls.append(chain.plain_text)
        for element in chain:
            if isinstance(element, Text):
                element.text = element.text.upper()


@pytest.mark.parametrize("chunk_size", [None, 4])
async def test_kiraai_style_after_xml_parse_gets_every_chain_at_once_and_seed_hooks_each_chain(chunk_size):
    reply = '<msg>hi <at id="42"/></msg><msg>the secret is x</msg><msg><pixel>tiny</pixel></msg>'
    provider = ScriptedProvider([reply], chunk_size=chunk_size)

    async with ChatHarness([PLUGINS / "output", SeedStyleShout], provider) as bot:
        chains = await bot.send("go")
        rewriter, shouter = bot.plugin("kira_output"), bot.plugin("seed_style_shout")

    assert shouter.calls == ["hi ", "the secret is x", ""], "the seed hook (MEDIUM) runs first, once per chain"
    assert rewriter.mentioned == ["42"]
    assert [c.plain_text for c in chains] == ["HI ", "", "(end of reply)"], "secret dropped, a chain appended"
    picture = chains[1][0]
    assert isinstance(picture, Image) and picture.caption == "tiny" and picture.source == "base64"
    assert any(isinstance(e, At) and e.pid == "42" for e in chains[0])
    assert "pixel" in rewriter.tag_names


async def test_session_plugin_sends_through_an_adapter_edits_history_and_publishes_a_notice():
    provider = ScriptedProvider(
        [
            [ToolCall("tell_group", {"group_id": "g1", "text": "hello group"})],
            "<msg>told them</msg>",
            [ToolCall("count_turns", {})],
            "<msg>counted</msg>",
            "<msg>stand up!</msg>",
        ]
    )

    async with ChatHarness([PLUGINS / "sessions"], provider, {"limits": {"history_turns": 10}}) as bot:
        tools = bot.plugin("kira_sessions")
        assert tools.persona.id == "default" and tools.default_model
        await bot.send("tell the group")
        group_sends = [r for r in bot.adapter.sent if r.session.sid == "test:gm:g1"]
        assert [r.chain.plain_text for r in group_sends] == ["hello group"]

        await bot.send("how long is our chat?")
        assert bot.requests[3].messages[-1].content == "1 turns"

        assert await tools.forget_last_turn("test:dm:user") == 1
        assert len(await bot.app.history.list_turns("test:dm:user")) == 1

        await tools.remind("test:dm:user", "time to stand up")
        turn = bot.app.flush("test:dm:user")  # the chat plugin buffered the notice like any message
        assert turn is not None
        result = await turn

    assert [c.plain_text for c in result.chains] == ["stand up!"]
    assert bot.requests[-1].user_prompt == "time to stand up"


async def test_web_plugin_loads_without_a_web_console_and_its_declarations_are_readable():
    async with ChatHarness([PLUGINS / "web"], ScriptedProvider()) as bot:
        plugin = bot.plugin("kira_web")
        declared = {d.path: (d, handler) for d, handler in web_declarations(plugin)}

    dashboard, render = declared["/dashboard"]
    assert dashboard.kind == "page" and dashboard.auth is True
    assert dashboard.options["menu"].label == {"zh": "仪表盘", "en": "Dashboard"}
    assert render().source_value == "./web"
    info, _ = declared["/info"]
    assert info.auth is False and info.options["menu"].icon == "Document"
    status, call = declared["/status"]
    assert status.kind == "api" and status.options["method"] == "GET"
    assert await call() == {"status": "running", "hits": 1}, "the handler is bound to the plugin"
