"""The agent loop through the testing kit: stages in order, stop() at every stage, tools, steps, failures."""

import asyncio

import pytest

from core.chat.message_elements import Text
from core.plugin import BasePlugin, Priority, on, register
from core.prompt_manager import Prompt
from core.provider import LLMResponse, ProviderError, ToolCall, ToolResult
from core.testing import ChatHarness, ScriptedProvider
from core.utils.tool_utils import BaseTool

pytestmark = pytest.mark.anyio

STAGES = [
    "im_batch_message",
    "llm_request",
    "llm_response",
    "after_xml_parse",
    "message_sent",
    "tool_result",
    "step_result",
    "final_result",
]


def recorder(log: list, stop_at: str | None = None):
    """A plugin that logs every stage it sees and calls stop() at `stop_at`."""

    class Recorder(BasePlugin):
        async def _seen(self, stage, event):
            log.append(stage)
            if stage == stop_at:
                event.stop()

        @on.im_batch_message()
        async def a(self, event, *_):
            await self._seen("im_batch_message", event)

        @on.llm_request()
        async def b(self, event, req, tag_set, *_):
            await self._seen("llm_request", event)

        @on.llm_response()
        async def c(self, event, resp, *_):
            await self._seen("llm_response", event)

        @on.after_xml_parse()
        async def d(self, event, chain, *_):
            await self._seen("after_xml_parse", event)

        @on.message_sent()
        async def e(self, event, sent, *_):
            await self._seen("message_sent", event)

        @on.tool_result()
        async def f(self, event, result, *_):
            await self._seen("tool_result", event)

        @on.step_result()
        async def g(self, event, resp, *_):
            await self._seen("step_result", event)

        @on.final_result()
        async def h(self, event, chain, *_):
            await self._seen("final_result", event)

        @register.tool(
            "echo",
            "Echo the text",
            {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
        )
        async def echo(self, event, *_, text: str) -> str:
            log.append("tool")
            return text

    return Recorder


TOOL_STEP = LLMResponse(text_response="Let me check.", tool_calls=[ToolCall("echo", {"text": "x"}, id="c1")])


async def test_stages_run_in_pipeline_order_and_text_beside_tool_calls_goes_out_first():
    log: list = []
    async with ChatHarness(plugins=[recorder(log)], provider=ScriptedProvider([TOOL_STEP, "Done."])) as bot:
        chains = await bot.send("hi")
    assert [c.plain_text for c in chains] == ["Let me check.", "Done."]
    step = ["llm_request", "llm_response", "after_xml_parse", "message_sent"]
    assert log == [
        "im_batch_message",
        *step,
        "tool",
        "tool_result",
        "step_result",
        *step,
        "step_result",
        "final_result",
    ]


@pytest.mark.parametrize("stage", ["im_message", "message_buffered", *STAGES])
async def test_stop_at_any_stage_ends_the_turn(stage):
    log: list = []
    Recorder = recorder(log, stop_at=stage)

    class EarlyStop(BasePlugin):
        @on.im_message(priority=Priority.LOW)
        async def stop_message(self, event, *_):
            if stage == "im_message":
                event.stop()

        @on.message_buffered()
        async def stop_buffered(self, event, *_):
            if stage == "message_buffered":
                event.stop()

    provider = ScriptedProvider([TOOL_STEP, "Done."])
    async with ChatHarness(plugins=[Recorder, EarlyStop], provider=provider) as bot:
        chains = await bot.send("hi")
        history = await bot.app.history.get_history("test:dm:user")
    if stage in ("im_message", "message_buffered"):
        assert log == [] and chains == []
        return
    assert log[-1] == stage, "nothing runs after the stage that stopped"
    assert "final_result" not in log[:-1]
    assert len(chains) == log.count("message_sent"), "nothing is sent after stop()"
    said = [m.content for m in history if m.role == "assistant" and m.content]
    assert said == [c.plain_text for c in chains], "history records only what happened"


async def test_final_result_fires_once_per_turn_with_everything_sent():
    finals = []

    class Final(BasePlugin):
        @on.final_result()
        async def final(self, event, chain, *_):
            finals.append(chain.plain_text)

    async with ChatHarness(plugins=[Final], provider=ScriptedProvider([TOOL_STEP, "Done.", "Again."])) as bot:
        bot.app.plugins.tools.add("echo", _EchoTool(), "test")
        await bot.send("one")
        await bot.send("two")
    assert finals == ["Let me check.Done.", "Again."]


class _EchoTool(BaseTool):
    name = "echo"
    description = "Echo"
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def execute(self, text: str) -> str:
        return text


async def test_invalid_tool_arguments_reach_the_model_as_an_error():
    provider = ScriptedProvider([[ToolCall("echo", {"text": 42}, id="bad")], "fixed"])
    async with ChatHarness(plugins=[recorder([])], provider=provider) as bot:
        await bot.send("hi")
    tool_messages = [m for m in provider.requests[1].messages if m.role == "tool"]
    assert tool_messages[0].tool_call_id == "bad"
    assert "invalid arguments" in tool_messages[0].content and "42 is not of type 'string'" in tool_messages[0].content


async def test_unknown_tool_broken_json_raising_and_slow_tools_become_error_results():
    results: list[ToolResult] = []

    class Tools(BasePlugin):
        @register.tool("boom", "Raises", {"type": "object", "properties": {}})
        async def boom(self, event, *_):
            raise RuntimeError("kaput")

        @register.tool("slow", "Hangs", {"type": "object", "properties": {}}, timeout=0.05)
        async def slow(self, event, *_):
            await asyncio.sleep(10)

        @on.tool_result()
        async def seen(self, event, result, *_):
            results.append(result)

    calls = [
        ToolCall("missing", {}),
        ToolCall("boom", {}),
        ToolCall("slow", {}),
        ToolCall("boom", {}, raw_arguments="{not json"),
    ]
    async with ChatHarness(plugins=[Tools], provider=ScriptedProvider([calls, "ok"])) as bot:
        assert [c.plain_text for c in await bot.send("hi")] == ["ok"]
    assert all(r.is_error for r in results)
    texts = [r.text for r in results]
    assert "no tool called 'missing'" in texts[0]
    assert "RuntimeError: kaput" in texts[1]
    assert "did not answer within 0.05 s" in texts[2]
    assert "not valid JSON" in texts[3]


async def test_independent_tool_calls_of_one_step_run_concurrently():
    both_started = asyncio.Event()
    started = []

    class Tools(BasePlugin):
        @register.tool("wait", "Waits for the other call", {"type": "object", "properties": {"n": {"type": "integer"}}})
        async def wait(self, event, *_, n: int):
            started.append(n)
            if len(started) == 2:
                both_started.set()
            await asyncio.wait_for(both_started.wait(), 5)  # deadlocks (and times out) if calls ran one by one
            return f"done {n}"

    provider = ScriptedProvider([[ToolCall("wait", {"n": 1}), ToolCall("wait", {"n": 2})], "ok"])
    async with ChatHarness(plugins=[Tools], provider=provider) as bot:
        await bot.send("hi")
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == ["done 1", "done 2"]


async def test_max_steps_withholds_tools_on_the_last_step_and_identical_calls_cannot_loop():
    loop_call = [ToolCall("echo", {"text": "again"})]
    provider = ScriptedProvider([loop_call, loop_call, loop_call, "final words"])
    async with ChatHarness(plugins=[recorder([])], provider=provider, config={"limits": {"max_steps": 4}}) as bot:
        chains = await bot.send("hi")
    assert [c.plain_text for c in chains] == ["final words"]
    assert len(provider.requests) == 4
    last = provider.requests[-1]
    assert len(last.tool_set) == 0 and last.tool_choice == "none"
    assert any(p.name == "conclude" for p in last.system_prompt)
    third_result = [m for m in last.messages if m.role == "tool"][-1]
    assert "already called 2 times" in third_result.content


async def test_tools_and_prompts_added_by_hooks_reach_the_provider():
    class Search(BaseTool):
        name = "my_search"
        description = "Search"
        parameters = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}

        async def execute(self, query: str) -> str:
            return f"found {query}"

    class Inject(BasePlugin):
        @on.llm_request()
        async def inject(self, event, req, tag_set, *args, **kwargs):
            req.tool_set.add(Search(ctx=self.ctx))
            req.get_prompt("memory").content += "The user likes tea."
            req.system_prompt.append(Prompt(content="Extra context", name="inject_ctx", source="inject"))

    provider = ScriptedProvider([[ToolCall("my_search", {"query": "tea"})], "Tea it is."])
    async with ChatHarness(plugins=[Inject], provider=provider) as bot:
        await bot.send("what do I like?")
    first = provider.requests[0]
    assert "my_search" in first.tool_set
    system = first.render_system()
    assert "The user likes tea." in system and "Extra context" in system
    assert [m.content for m in provider.requests[1].messages if m.role == "tool"] == ["found tea"]


async def test_a_model_failure_is_shown_as_an_error_and_never_stored_as_the_assistants_words():
    provider = ScriptedProvider([ProviderError("upstream returned 500")])
    async with ChatHarness(provider=provider) as bot:
        chains = await bot.send("hi")
        history = await bot.app.history.get_history("test:dm:user")
    assert "could not get an answer" in chains[0].plain_text
    assert history == [], "a turn whose first model call failed stores nothing, so it cannot wedge the session"


async def test_history_is_saved_per_turn_and_sent_back_to_the_model():
    provider = ScriptedProvider(["Hello Ann.", "You are Ann."])
    async with ChatHarness(provider=provider) as bot:
        await bot.send("I am Ann")
        await bot.send("Who am I?")
    second = provider.requests[1]
    assert [(m.role, m.content) for m in second.messages] == [("user", "I am Ann"), ("assistant", "Hello Ann.")]
    assert second.user_prompt == "Who am I?"


async def test_a_tool_result_with_attachments_is_offered_to_the_file_tag():
    class Shot(BasePlugin):
        @register.tool("shot", "Screenshot", {"type": "object", "properties": {}, "required": []})
        async def shot(self, event, *_):
            return ToolResult(text="Screenshot taken", attachments=[Text("pretend image")])

    async with ChatHarness(plugins=[Shot], provider=ScriptedProvider([[ToolCall("shot", {})], "ok"])) as bot:
        await bot.send("hi")
        assert bot.requests[1].messages[-1].content == "Screenshot taken"
