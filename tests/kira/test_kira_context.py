"""KiraAI's documented context API (`self.ctx`), one test per name, from KiraAI's plugin docs and its
core/plugin/plugin_context.py: `ctx.config`, the LLM clients, `get_plugin_inst`, `get_buffer`, `publish_notice`,
and the managers (`message_processor`, `adapter_mgr`, `session_mgr`, `provider_mgr`, `persona_mgr`, `event_bus`)."""

from __future__ import annotations

import pytest

from core.adapter.adapter_utils import IMAdapter
from core.chat import KiraCustomEvent, KiraMessageEvent, MessageChain
from core.chat.message_elements import Text
from core.plugin import BasePlugin, NotSupportedHere, PluginContext, on
from core.provider import LLMModelClient, LLMRequest
from core.testing import ChatHarness, ScriptedProvider

pytestmark = pytest.mark.anyio

PROVIDERS = {
    "providers": [{"name": "main", "type": "openai", "base_url": "http://127.0.0.1:9", "models": ["m1", "m2"]}]
}


class Probe(BasePlugin):
    """Records what reaches it; the tests reach the context through it."""

    async def initialize(self):
        self.events: list[KiraMessageEvent] = []
        self.custom: list[KiraCustomEvent] = []

    @on.im_message()
    async def record(self, event, *args, **kwargs):
        self.events.append(event)

    @on.custom_event(event_name="kira.ping")
    async def ping(self, event, *args, **kwargs):
        self.custom.append(event)


class Other(BasePlugin):
    pass


def harness(*responses, config=None) -> ChatHarness:
    return ChatHarness([Probe, Other], ScriptedProvider(list(responses)), config)


# -- ctx.config ------------------------------------------------------------------------------------------------------


async def test_config_answers_the_apps_keys_in_kiraais_shape_and_the_plugins_own_settings():
    config = {"kira": {"locale": {"TZ": "Asia/Shanghai"}}, "limits": {"history_turns": 7}}
    async with harness(config=config) as bot:
        ctx = bot.plugin("probe").ctx
        ctx.config["my_setting"] = 1  # the plugin's own settings are a dict as before
        assert ctx.config["my_setting"] == 1 and dict(ctx.config) == {"my_setting": 1}
        assert ctx.config["bot_config"]["bot"]["max_memory_length"] == 7
        assert ctx.config.get("bot_config", {}).get("agent", {})["max_tool_loop"] == bot.app.config.limits.max_steps
        assert ctx.config.get_config("locale.TZ") == "Asia/Shanghai" and str(ctx.get_timezone()) == "Asia/Shanghai"
        assert ctx.config.get_config("bot_config.nothing.here", "dflt") == "dflt"
        assert "bot_config" in ctx.config and ctx.config.bot_config["bot"]
        assert ctx.config.get("absent", 3) == 3


async def test_config_without_an_application_names_the_missing_key():
    ctx = PluginContext("lonely", config={"a": 1})

    assert ctx.config["a"] == 1
    with pytest.raises(KeyError, match="'bot_config' is neither a setting of plugin 'lonely'"):
        ctx.config["bot_config"]


# -- LLM clients -----------------------------------------------------------------------------------------------------


async def test_get_default_llm_client_chats_with_the_apps_model():
    async with harness("fine, thanks", config=PROVIDERS) as bot:
        client = bot.plugin("probe").ctx.get_default_llm_client()
        resp = await client.chat(LLMRequest(messages=[{"role": "user", "content": "how are you?"}]))

    assert isinstance(client, LLMModelClient) and client.model.uuid == "main:m1"
    assert resp.text_response == "fine, thanks"
    assert bot.requests[0].model == "m1"


async def test_get_default_fast_llm_client_is_the_same_model_here():
    async with harness(config=PROVIDERS) as bot:
        ctx = bot.plugin("probe").ctx
        assert ctx.get_default_fast_llm_client().model.uuid == ctx.get_default_llm_client().model.uuid


async def test_get_llm_client_takes_provider_colon_model_and_answers_none_for_an_unknown_one():
    async with harness(config=PROVIDERS) as bot:
        ctx = bot.plugin("probe").ctx
        assert ctx.get_llm_client(model_uuid="main:m2").model.model_id == "m2"
        assert ctx.get_llm_client(llm_type="default").model.model_id == "m1"
        assert ctx.get_llm_client(model_uuid="elsewhere:m1") is None
        assert ctx.get_llm_client(model_uuid="no-colon") is None


# -- plugins and buffers ---------------------------------------------------------------------------------------------


async def test_get_plugin_inst_returns_another_loaded_plugin_or_none():
    async with harness() as bot:
        ctx = bot.plugin("probe").ctx
        assert ctx.get_plugin_inst("other") is bot.plugin("other")
        assert ctx.get_plugin_inst("nobody") is None


async def test_get_buffer_shows_the_sessions_waiting_messages():
    async with harness() as bot:
        ctx = bot.plugin("probe").ctx
        await bot.app.receive(bot.message("one"))
        await bot.app.receive(bot.message("two"))
        buffer = ctx.get_buffer("test:dm:user")
        assert buffer.get_length() == 2 and [e.message_repr for e in buffer.buffer] == ["one", "two"]
        assert ctx.message_processor.get_session_buffer_length("test:dm:user") == 2
        assert [e.message_repr for e in buffer.pop(1)] == ["one"]
        assert buffer.get_length() == 1


# -- publish_notice --------------------------------------------------------------------------------------------------


async def test_publish_notice_delivers_a_notice_through_the_pipeline():
    async with harness("<msg>noted</msg>") as bot:
        probe = bot.plugin("probe")
        await probe.ctx.publish_notice("test:gm:g7", MessageChain([Text("build failed")]), is_mentioned=True)
        event = probe.events[-1]
        assert event.is_notice and event.is_group_message() and event.session.sid == "test:gm:g7"
        assert event.message.message_id == "system_message" and event.sender.nickname == "system"
        result = await bot.app.flush("test:gm:g7")

    assert [c.plain_text for c in result.chains] == ["noted"]


async def test_publish_notice_refuses_a_malformed_session_or_an_unknown_adapter():
    async with harness() as bot:
        ctx = bot.plugin("probe").ctx
        with pytest.raises(ValueError, match="Failed to parse session"):
            await ctx.publish_notice("test-dm-1", MessageChain([Text("x")]))
        with pytest.raises(ValueError, match="Failed to get adapter: qq"):
            await ctx.publish_notice("qq:dm:1", MessageChain([Text("x")]))
        assert bot.plugin("probe").events == [], "nothing was delivered"


# -- the managers ------------------------------------------------------------------------------------------------


async def test_message_processor_flushes_a_session_and_sends_a_chain():
    async with harness("<msg>both</msg>") as bot:
        processor = bot.plugin("probe").ctx.message_processor
        assert await processor.flush_session_messages("test:dm:user") is False, "nothing buffered"
        await bot.app.receive(bot.message("a"))
        assert await processor.flush_session_messages("test:dm:user") is True
        await bot.app.scheduler.join()
        sent = await processor.send_message_chain("test:dm:someone", MessageChain([Text("direct")]))
        with pytest.raises(NotSupportedHere, match="not supported here: message_processor.handle_event"):
            processor.handle_event(None)

    assert sent.ok and [r.chain.plain_text for r in bot.adapter.sent] == ["both", "direct"]
    assert bot.adapter.sent[1].session.sid == "test:dm:someone"


async def test_adapter_mgr_gives_the_running_adapters_as_kiraai_im_adapters():
    async with harness() as bot:
        adapters = bot.plugin("probe").ctx.adapter_mgr
        adapter = adapters.get_adapter("test")
        assert isinstance(adapter, IMAdapter) and adapter.info.name == "test"
        assert "text" in adapter.message_types and adapters.get_adapter("nope") is None
        result = await adapter.send_direct_message("u9", MessageChain([Text("hi u9")]))
        with pytest.raises(NotSupportedHere, match="adapter.get_client"):
            adapter.get_client()
        with pytest.raises(NotSupportedHere, match="adapter_mgr.delete_adapter"):
            adapters.delete_adapter("test")

    assert result.ok and bot.adapter.sent[-1].session.sid == "test:dm:u9"


async def test_session_mgr_reads_and_edits_history_when_awaited():
    async with harness("<msg>one</msg>", "<msg>two</msg>") as bot:
        sessions = bot.plugin("probe").ctx.session_mgr
        await bot.send("first")
        await bot.send("second")
        sid = "test:dm:user"
        memory = await sessions.read_memory(sid)
        assert [[m["role"] for m in turn] for turn in memory] == [["user", "assistant"], ["user", "assistant"]]
        assert (await sessions.fetch_memory(sid))[0] == {"role": "user", "content": "first"}
        assert await sessions.get_memory_count(sid) == 2
        await sessions.write_memory(sid, [[{"role": "user", "content": "only this"}]])
        assert await sessions.fetch_memory(sid) == [{"role": "user", "content": "only this"}]
        sessions.update_session_info(sid, title="Me", description="the tester")
        info = sessions.get_session_info(sid)
        assert (info.sid, info.session_title, info.session_description) == (sid, "Me", "the tester")
        assert [s.sid for s in await sessions.get_session_info()] == [sid]
        await sessions.delete_session(sid)
        assert sessions.get_existing_memory_snapshot(sid) is None, "a plain None (KiraAI's answer)"


async def test_session_mgr_write_memory_checks_every_message_before_deleting_anything():
    async with harness("<msg>kept</msg>") as bot:
        sessions = bot.plugin("probe").ctx.session_mgr
        await bot.send("keep me")
        with pytest.raises(ValueError, match="not an OpenAI chat message"):
            await sessions.write_memory("test:dm:user", [[{"role": "nobody", "content": "x"}]])
        assert len(await sessions.read_memory("test:dm:user")) == 1


async def test_provider_mgr_has_the_llm_and_says_other_kinds_are_not_set():
    async with harness(config=PROVIDERS) as bot:
        providers = bot.plugin("probe").ctx.provider_mgr
        assert providers.get_default_llm().model.uuid == "main:m1"
        assert providers.get_model_client("main", "m2").model.model_id == "m2"
        assert providers.get_model_client("other", "m2") is None
        assert providers.get_provider_info("main").provider_type == "openai"
        with pytest.raises(ValueError, match="default_tts not set"):
            providers.get_default_tts()


async def test_persona_mgr_answers_the_configured_persona():
    async with harness() as bot:
        bot.app.agent.settings.sections = {"persona": "A calm librarian."}
        personas = bot.plugin("probe").ctx.persona_mgr
        persona = await personas.get_persona()
        assert persona.content == "A calm librarian." and persona.is_active
        assert await personas.get_persona("someone-else") is None
        with pytest.raises(NotSupportedHere, match="persona_mgr.create_persona"):
            personas.create_persona(persona)


async def test_event_bus_publishes_custom_and_message_events():
    async with harness("<msg>hello back</msg>") as bot:
        probe = bot.plugin("probe")
        await probe.ctx.event_bus.publish(KiraCustomEvent(event_name="kira.ping", payload={"n": 1}, source_plugin="x"))
        assert probe.custom[0].payload == {"n": 1} and probe.custom[0].event_name == "kira.ping"
        event = await probe.ctx.emit_custom_event("kira.ping", {"n": 2})
        assert event.source_plugin == "probe" and probe.custom[1].data == {"n": 2}
        await probe.ctx.event_bus.publish(KiraMessageEvent(bot.message("via the bus")))
        assert probe.events[-1].message_repr == "via the bus"
        with pytest.raises(NotSupportedHere, match="event_bus.subscribe"):
            probe.ctx.event_bus.subscribe("x", print)


async def test_every_manager_without_an_application_names_the_method_it_cannot_do():
    ctx = PluginContext("lonely")

    for manager, method in [
        ("message_processor", "flush_session_messages"),
        ("adapter_mgr", "get_adapter"),
        ("session_mgr", "read_memory"),
        ("provider_mgr", "get_default_llm"),
        ("persona_mgr", "get_persona"),
        ("event_bus", "publish"),
        ("tool_mgr", "register_tool"),
    ]:
        with pytest.raises(NotSupportedHere, match=f"not supported here: {manager}.{method}"):
            getattr(getattr(ctx, manager), method)
    with pytest.raises(NotSupportedHere, match="provider_mgr.get_default_llm"):
        ctx.get_default_llm_client()
