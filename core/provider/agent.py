"""The agent loop: one turn of one session, from the batch to the model, tools and sent messages, to history.

Per step: `llm_request` hooks edit the request -> the model answers -> `llm_response` hooks -> the output is parsed
into messages, each passed to `after_xml_parse` hooks and sent (text written beside tool calls goes out before the
tools run) -> tools run concurrently, one `tool_result` per call -> `step_result`. When the provider streams and no
plugin hooks `llm_response`, each message is parsed, passed to `after_xml_parse` and sent as soon as it is
complete. Steps repeat while the model
calls tools, at most `max_steps`; the last step withholds tools and tells the model to conclude. `final_result`
runs exactly once per turn that was not stopped, after the turn is appended to history. `stop()` at any stage ends
the turn: nothing later runs, nothing more is sent, and history records only what happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

import anyio

from core.chat import (
    KiraEvent,
    KiraExceptionEvent,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraStepResult,
    MessageChain,
    MessageChains,
    Session,
    TurnResult,
)
from core.chat.message_elements import Text
from core.plugin import HookEngine, wants_whole_output
from core.prompt_manager import Prompt, UserPrompt, default_system_prompt
from core.provider.llm import (
    ChatMessage,
    ContextOverflowError,
    LLMProvider,
    LLMRequest,
    LLMResponse,
    ProviderError,
    ToolCall,
    ToolResult,
)
from core.provider.window import ContextWindow
from core.services import apply_picture_budget, current_tool_call, visible_tools
from core.tag import BaseTag, StreamParser, TagSet, parse_output
from core.trace import current_trace
from core.utils.json_schema import UnusableSchemaError, schema_errors
from core.utils.log import logger
from core.utils.registry import OwnedRegistry
from core.utils.tasks import must_propagate, raised_at
from core.utils.text import valid_text
from core.utils.tool_utils import MAX_TOOL_TIMEOUT, BaseTool, ToolSet

__all__ = ["AgentLoop", "AgentSettings", "CONCLUDE_PROMPT"]

CONCLUDE_PROMPT = (
    "This is the last step of this turn: tools are no longer available. Answer the user now with what you have."
)
DEFAULT_ROLE = "You are a friendly chat bot. Answer briefly and helpfully, in the language the user writes in."
#: How often one exact call (same tool, same arguments) may run in a turn before it is refused.
MAX_IDENTICAL_CALLS = 2


@dataclass
class AgentSettings:
    """Limits and texts of the agent loop."""

    max_steps: int = 8
    tool_timeout: float = 30.0
    sections: dict[str, str] | None = None  # initial content of the default system prompt sections (by name)
    error_text: str = "Sorry, I could not get an answer from the model ({reason})."
    cut_text: str = "(Your message was too long for the model: it read the first {kept} characters.)"
    stream: bool = True  # stream when the provider can and no plugin hooks llm_response
    max_tool_timeout: float = MAX_TOOL_TIMEOUT
    max_messages: int = 20  # messages one turn may send
    max_chars: int = 20_000  # characters of text one turn may send
    capped_text: str = "(The rest of this answer was not sent: it was longer than one answer may be.)"


def chat_environment(batch: KiraMessageBatchEvent) -> str:
    """The `chat_env` section KiraAI builds for each turn: the platform, the adapter, the kind of chat, the bot's
    account, the session's title and description, and (in a group) the group and who spoke in this batch."""
    session, adapter = batch.session, batch.adapter
    group = batch.group
    title = (
        session.session_title
        or (group.name if group is not None else "")
        or (batch.sender.nickname if batch.sender is not None else "")
    )
    lines = [
        "## Chat environment",
        f"- platform: `{adapter.platform}`",
        f"- adapter: `{adapter.name}`",
        f"- chat type: `{'GroupMessage' if batch.is_group_message() else 'DirectMessage'}`",
        f"- your account id: `{batch.self_id}`",
        f"- session title: `{title}`",
        f"- session description: `{session.session_description or ''}`",
    ]
    if group is not None:
        lines.append(f"- group: `{group.name}` (id `{group.group_id}`)")
    speakers = dict.fromkeys(
        f"{m.sender.nickname or m.sender.user_id} (id `{m.sender.user_id}`)"
        for m in batch.messages
        if m.sender is not None
    )
    if speakers:
        lines.append(f"- who spoke: {', '.join(speakers)}")
    return "\n".join(lines)


def accounts_of(batch: KiraMessageBatchEvent) -> str:
    """The `accounts` section: the bot's account on the batch's adapter, in KiraAI's line format."""
    adapter = batch.adapter
    return (
        f"## Accounts\nPlatform: {adapter.platform}, adapter_name: {adapter.name}, "
        f"account_id: {batch.self_id or 'unknown'}"
    )


class TurnHistory(Protocol):
    """What the agent loop needs of a history store: a session's past messages, and appending a turn."""

    async def get_history(self, sid: str) -> list[ChatMessage]:
        """The messages of the session's stored turns, oldest first, within the store's budget."""
        ...

    async def append_turn(
        self, sid: str, messages: list[ChatMessage], meta: dict[str, Any] | None = None, *, done: Sequence[str] = ()
    ) -> int:
        """Store one turn's messages, marking the inbox entries `done` (the messages it answered); returns its id."""
        ...

    def mark_done(self, ids: Sequence[str]) -> Awaitable[None] | None:
        """Mark inbox entries done when their turn stored nothing (an awaitable, or None when there were none)."""


@dataclass
class _Turn:
    """What one turn has gathered so far: the history it started from, its own messages (for history), everything
    it sent, and how often each exact tool call ran."""

    batch: KiraMessageBatchEvent
    result: TurnResult
    user_prompt: UserPrompt
    history: list[ChatMessage] = field(default_factory=list)
    messages: list[ChatMessage] = field(default_factory=list)
    sent_all: MessageChain = field(default_factory=MessageChain)
    calls_seen: dict[str, int] = field(default_factory=dict)


@dataclass
class _Step:
    """One model step of a turn: its request and tags (traced when the turn is), whether it streams, what it sent."""

    index: int
    req: LLMRequest
    tag_set: TagSet
    streaming: bool = False
    whole_output: bool = False  # a KiraAI-style after_xml_parse hook sees all the step's messages at once
    sent: list[KiraIMSentResult] = field(default_factory=list)


#: The one send path: `send(session, chain, event)` delivers through the session's adapter and fires
#: `message_sent` (the app's `send`).
SendPath = Callable[[Session, MessageChain, KiraEvent], Awaitable[KiraIMSentResult]]


class AgentLoop:
    """Runs turns. `send(session, chain, event)` is the app's one send path."""

    def __init__(
        self,
        engine: HookEngine,
        provider: LLMProvider,
        send: SendPath,
        *,
        tools: OwnedRegistry[BaseTool] | None = None,
        tags: OwnedRegistry[BaseTag] | None = None,
        history: TurnHistory | None = None,
        drafts: Callable[[Session], Callable[[str], Awaitable[None]] | None] | None = None,
        settings: AgentSettings | None = None,
        typing: Callable[[Session], AbstractAsyncContextManager[None]] | None = None,
    ) -> None:
        self.engine = engine
        self.provider = provider
        self.send = send
        self.tools = tools if tools is not None else OwnedRegistry("tool")
        self.tags = tags if tags is not None else OwnedRegistry("tag")
        self.history = history
        self.drafts = drafts
        #: Held around each model call of a session (its adapter's typing indicator); none by default.
        self._typing = typing or (lambda session: contextlib.nullcontext())
        #: What fits the model's context window; learns the model's characters per token from its answers.
        self.window = ContextWindow(provider)
        self.settings = settings or AgentSettings()

    # -- the turn -------------------------------------------------------------------------------------------------

    async def run_turn(self, batch: KiraMessageBatchEvent) -> TurnResult:
        """Run one turn for `batch`; never raises for a plugin, tool or model failure."""
        with self.engine.tracer.turn(batch) as trace:  # trace: everything below records into the turn's trace
            result = await self._run_turn(batch)
            result.trace_id = trace.id if trace is not None else ""
            return result

    async def _run_turn(self, batch: KiraMessageBatchEvent) -> TurnResult:
        """`im_batch_message`, the steps while the model calls tools, the turn stored, then `final_result`."""
        await self.engine.dispatch("im_batch_message", batch)
        if batch.is_stopped:
            await self._store(batch, [])
            return TurnResult(batch, stopped=True)
        history = await self.history.get_history(batch.sid) if self.history is not None else []
        # The user's words as the `im_batch_message` hooks left them (they may rewrite `message_str`).
        turn = _Turn(batch, TurnResult(batch), self._user_prompt(batch), history)
        max_steps = max(1, self.settings.max_steps)
        try:
            for index in range(max_steps):
                if not await self._run_step(turn, index, last=index == max_steps - 1):
                    break
        except asyncio.CancelledError:
            if turn.result.sent or turn.result.sending:  # said: a restart must not answer these messages again
                await self._store_surely(batch, turn.messages)
            raise
        turn.result.stopped = batch.is_stopped
        # Stored before `final_result`: a reply that was sent is in history even if the process dies while those
        # hooks (a memory plugin, say) still run, and its messages leave the inbox in the same transaction.
        await self._store_surely(batch, turn.messages)
        if not batch.is_stopped:
            await self.engine.dispatch("final_result", batch, turn.sent_all)
        return turn.result

    async def _run_step(self, turn: _Turn, index: int, *, last: bool) -> bool:
        """One step: request, model, output, tools, `step_result`. True when the turn goes on to another step."""
        step = await self._prepare_step(turn, index, last=last)
        if step is None:
            return False
        try:
            resp = await self._traced_model_call(turn, step)
        except ProviderError as exc:
            await self._model_failed(turn, step, exc)
            return False
        return await self._use_answer(turn, step, resp, last=last)

    async def _prepare_step(self, turn: _Turn, index: int, *, last: bool) -> _Step | None:
        """The step's request, after the `llm_request` hooks and fitted to the window; None when a hook stopped."""
        batch = turn.batch
        req, tag_set = self._build_request(
            batch, turn.history, turn.messages, turn.user_prompt if index == 0 else UserPrompt()
        )
        await self.engine.dispatch("llm_request", batch, req, tag_set)
        if batch.is_stopped:
            return None
        self._finish_request(req, tag_set, last)
        step = _Step(index, req, tag_set)
        await self._fit(turn, step)
        # Stream only when no plugin needs the whole response before anything is sent (an `llm_response` hook may
        # rewrite or stop it, a KiraAI-style after_xml_parse hook needs all of it); else the stages keep their order.
        step.whole_output = wants_whole_output(self.engine)
        step.streaming = (
            self.settings.stream
            and self.provider.supports_streaming
            and not self.engine.chain("llm_response")
            and not step.whole_output
        )
        return step

    async def _use_answer(self, turn: _Turn, step: _Step, resp: LLMResponse, *, last: bool) -> bool:
        """`llm_response`, the output sent (unless it streamed), the tools run, `step_result`. True when the model
        called tools and the turn goes on."""
        batch, dispatch = turn.batch, self.engine.dispatch
        _make_valid(resp)
        if not batch.is_stopped:
            await dispatch("llm_response", batch, resp)
        if not batch.is_stopped and not step.streaming:
            await self._deliver(batch, resp, step.tag_set, turn.result, step.sent, step.whole_output)
        resp.step = KiraStepResult(raw_output=resp.text_response, sent=step.sent, step=step.index)
        turn.sent_all.extend(e for r in step.sent for e in r.chain)
        if batch.is_stopped or turn.result.capped:  # capped: the answer is over, what was sent is what it said
            if step.sent:
                turn.messages.append(ChatMessage("assistant", _sent_text(step.sent)))
            return False
        calls = resp.tool_calls if not last else []
        turn.messages.append(ChatMessage("assistant", resp.text_response, tool_calls=list(calls)))
        if calls and not await self._step_tools(turn, step.req.tool_set, resp, calls):
            return False
        await dispatch("step_result", batch, resp)
        return bool(calls) and not batch.is_stopped

    async def _fit(self, turn: _Turn, step: _Step) -> None:
        """Fit the step's request to the window; on the first step the user's message joins the turn (as
        persisted) and, when it had to be cut, the user is told."""
        cut = self.window.fit(step.req, len(turn.history), cut_user=step.index == 0)
        if step.index == 0:
            turn.messages.append(ChatMessage("user", step.req.user_prompt.persisted_text))  # persist=False stays out
            if cut:
                notice = MessageChain([Text(self.settings.cut_text.format(kept=cut))])
                turn.sent_all.extend((await self._send(turn.batch, notice, turn.result)).chain)

    async def _traced_model_call(self, turn: _Turn, step: _Step) -> LLMResponse:
        """`_model_call`, recorded in the turn's trace (with the step's tags traced) when there is one."""
        trace = current_trace()
        if trace is None:
            return await self._model_call(turn, step)
        step.tag_set, started = self.engine.tracer.traced_tags(step.tag_set), time.perf_counter_ns()
        try:
            resp = await self._model_call(turn, step)
        except ProviderError as exc:
            trace.model_call(self.provider.name, step.req, None, started, streamed=step.streaming, error=str(exc))
            trace.error = str(exc)
            raise
        trace.model_call(self.provider.name, step.req, resp, started, streamed=step.streaming)
        return resp

    async def _model_call(self, turn: _Turn, step: _Step) -> LLMResponse:
        """The model's answer, under the session's typing indicator. A request the model says does not fit is fitted
        again by the model's own count and sent once more, unless part of the answer was already sent."""
        try:
            resp = await self._answer(turn, step)
        except ContextOverflowError as exc:
            # The estimate was too kind for this text: learn the model's own count, fit, retry once.
            if step.sent or not self.window.learn_overflow(step.req, exc):
                raise
            # History left in the request: all but this turn's own messages (none in it yet on the first step).
            history_len = len(step.req.messages) - (len(turn.messages) if step.index else 0)
            self.window.fit(step.req, history_len, cut_user=step.index == 0)
            if step.index == 0:
                turn.messages[0] = ChatMessage("user", step.req.user_prompt.persisted_text)
            resp = await self._answer(turn, step)
        self.window.learn(step.req, resp)
        return resp

    async def _answer(self, turn: _Turn, step: _Step) -> LLMResponse:
        async with self._typing(turn.batch.session):  # the platform's "typing..." while the model writes
            if step.streaming:
                return await self._stream_model(turn.batch, step.req, step.tag_set, turn.result, step.sent)
            return await self._call_model(step.req)

    async def _model_failed(self, turn: _Turn, step: _Step, exc: ProviderError) -> None:
        """The model could not answer: keep what a stream sent, tell the user (never the server's own words)."""
        logger.error("model call failed for %s: %s", turn.batch.sid, exc)
        turn.result.error = exc.public  # shown to whoever chats (the web chat's `turn_ended`): no URL, no body
        turn.sent_all.extend(e for r in step.sent for e in r.chain)  # a stream may have sent part of it
        if step.sent:
            turn.messages.append(ChatMessage("assistant", _sent_text(step.sent)))
        elif step.index == 0:
            turn.messages.clear()  # nothing happened: a failed first call leaves no trace that could wedge the session
        # `exc.public`, never `exc`: the user sees no server text, URL or key (the log above has them).
        notice = MessageChain([Text(self.settings.error_text.format(reason=exc.public))])
        turn.sent_all.extend((await self._send(turn.batch, notice, turn.result)).chain)

    async def _step_tools(self, turn: _Turn, tool_set: ToolSet, resp: LLMResponse, calls: list[ToolCall]) -> bool:
        """Run the step's tool calls into `resp.tool_results` and the turn, then `tool_result` for each; False once
        a hook stopped the turn."""
        resp.tool_results = await self._run_tools(turn.batch, tool_set, calls, turn.calls_seen)
        turn.messages.extend(ChatMessage("tool", r.text, tool_call_id=r.call_id) for r in resp.tool_results)
        for tool_result in resp.tool_results:
            await self.engine.dispatch("tool_result", turn.batch, tool_result)
            if turn.batch.is_stopped:
                return False
        return True

    async def _store_surely(self, batch: KiraMessageBatchEvent, turn: list[ChatMessage]) -> None:
        """`_store`, carried to its end when the turn is cancelled meanwhile (a shutdown cancels running turns): a
        reply that was sent is then in history and its messages leave the inbox, so the next start does not answer
        them a second time. The store's own failure still reaches the turn."""
        await asyncio.shield(asyncio.ensure_future(self._store(batch, turn)))

    async def _store(self, batch: KiraMessageBatchEvent, turn: list[ChatMessage]) -> None:
        """Append the turn to history (if it has messages) and mark the batch's inbox entries done."""
        if self.history is None:
            return
        done = [m.inbox_id for m in batch.messages if m.inbox_id is not None]
        if turn:
            await self.history.append_turn(batch.sid, turn, done=done)
            if (trace := current_trace()) is not None:  # trace
                trace.history(len(turn))
        elif done:
            await self.history.mark_done(done)  # type: ignore[misc] - not None: `done` is not empty

    @staticmethod
    def _user_prompt(batch: KiraMessageBatchEvent) -> UserPrompt:
        """One part per message, its `message_str` (which a hook may have rewritten), after `[sender]` in a batch."""
        if len(batch.messages) == 1:
            return UserPrompt([Prompt(batch.messages[0].message_str, "message", "core")])
        parts = []
        for m in batch.messages:
            who = m.sender.nickname or m.sender.user_id
            parts.append(Prompt(f"[{who}] {m.message_str}", "message", "core"))
        return UserPrompt(parts)

    # -- requests -------------------------------------------------------------------------------------------------

    def _build_request(
        self,
        batch: KiraMessageBatchEvent,
        history: list[ChatMessage],
        turn: list[ChatMessage],
        user_prompt: UserPrompt,
    ) -> tuple[LLMRequest, TagSet]:
        tool_set = ToolSet(visible_tools(self.tools, batch.role))
        tag_set = TagSet()
        for tag in self.tags.active():
            tag_set.register(tag)
        system = default_system_prompt({"role": DEFAULT_ROLE, **(self.settings.sections or {})})
        filled = {
            "time": lambda: f"Current time: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
            "chat_env": lambda: chat_environment(batch),
            "accounts": lambda: accounts_of(batch),
            "output": lambda: (
                f"Tools may be called over several steps, at most {self.settings.max_steps} steps in "
                "a turn; call one only when the answer needs it."
            ),
        }
        for section in system:
            if section.name in filled and not section.content:
                section.content = filled[section.name]()
        req = LLMRequest(messages=[*history, *turn], system_prompt=system, user_prompt=user_prompt, tool_set=tool_set)
        return req, tag_set

    @staticmethod
    def _finish_request(req: LLMRequest, tag_set: TagSet, last: bool) -> None:
        """After the `llm_request` hooks: teach the tags the request ended up with, and close the last step."""
        fmt = req.get_prompt("format")
        protocol = tag_set.to_prompt() if len(tag_set) else ""
        if fmt is None:
            req.system_prompt.append(Prompt(protocol, "format", "core"))
        elif protocol:
            fmt.content = f"{protocol}\n{fmt.content}" if fmt.content else protocol
        if last:
            req.tool_set = ToolSet()
            req.tool_choice = "none"
            req.system_prompt.append(Prompt(CONCLUDE_PROMPT, "conclude", "core"))
        elif not req.tool_set:
            req.tool_choice = "none"

    async def _call_model(self, req: LLMRequest) -> LLMResponse:
        started = time.perf_counter()
        try:
            resp = await self.provider.complete(req)
        except ProviderError:
            raise
        except Exception as exc:  # a provider bug must not crash the turn either
            raise ProviderError(f"{type(exc).__name__}: {exc}") from exc
        if not resp.time_cost:
            resp.time_cost = time.perf_counter() - started
        return resp

    # -- output -------------------------------------------------------------------------------------------------

    async def _deliver(
        self,
        batch: KiraMessageBatchEvent,
        resp: LLMResponse,
        tag_set: TagSet,
        result: TurnResult,
        step_sent: list[KiraIMSentResult],
        whole_output: bool = False,
    ) -> None:
        """Parse the step's whole output into messages and emit each (all at once for KiraAI-style hooks)."""
        if not resp.text_response.strip():
            return
        chains = await parse_output(resp.text_response, tag_set, batch, on_error=self._tag_failed(batch))
        if whole_output:
            await self._emit(batch, chains, result, step_sent)
            return
        for chain in chains:
            if not await self._emit(batch, [chain], result, step_sent):
                return

    async def _stream_model(
        self,
        batch: KiraMessageBatchEvent,
        req: LLMRequest,
        tag_set: TagSet,
        result: TurnResult,
        step_sent: list[KiraIMSentResult],
    ) -> LLMResponse:
        """Stream the answer, emitting each message as soon as its `</msg>` arrives (before `llm_response`)."""
        parser = StreamParser(tag_set, batch, on_error=self._tag_failed(batch))
        draft = self.drafts(batch.session) if self.drafts is not None else None
        started = time.perf_counter()
        resp: LLMResponse | None = None
        text: list[str] = []
        unsent = ""  # raw output since the last finished message, for drafts
        stream = self.provider.stream(req)
        try:
            async for item in stream:
                text.append(item.text)
                if item.response is not None:
                    resp = item.response
                for chain in await parser.feed(item.text) if item.text else ():
                    if not await self._emit(batch, [chain], result, step_sent):
                        return resp or LLMResponse(text_response="".join(text))
                if draft is not None and item.text:
                    unsent = _after_last_message(unsent + item.text)
                    if shown := visible_draft(unsent):
                        await draft(shown)
        except ProviderError:
            raise
        except Exception as exc:  # a provider bug must not crash the turn
            raise ProviderError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            await stream.aclose()
        for chain in await parser.close():
            if not await self._emit(batch, [chain], result, step_sent):
                break
        if resp is None:
            raise ProviderError("the model's stream ended without a final response")
        if not resp.time_cost:
            resp.time_cost = time.perf_counter() - started
        return resp

    async def _emit(
        self,
        batch: KiraMessageBatchEvent,
        chains: list[MessageChain],
        result: TurnResult,
        step_sent: list[KiraIMSentResult],
    ) -> bool:
        """`after_xml_parse` for these messages, then send each one not emptied, in order; False once a hook
        stopped the turn. Seed-003 hooks see each chain, KiraAI-style hooks the `MessageChains`."""
        parsed = MessageChains(chains)
        await self.engine.dispatch("after_xml_parse", batch, parsed)
        if batch.is_stopped:
            return False
        for chain in parsed:
            if chain:
                if result.capped:
                    return False
                chars = len(chain.message_repr)
                if (
                    len(result.sent) >= self.settings.max_messages
                    or result.chars_sent + chars > self.settings.max_chars
                ):
                    # A model (or a prompt injection) writing 100,000 <msg> blocks must not become 100,000 messages.
                    result.capped = True
                    logger.warning(
                        "turn of %s reached its cap (%d messages, %d characters): the rest is not sent",
                        batch.sid,
                        self.settings.max_messages,
                        self.settings.max_chars,
                    )
                    notice = MessageChain([Text(self.settings.capped_text)])
                    step_sent.append(await self._send(batch, notice, result))
                    return False
                result.chars_sent += chars
                step_sent.append(await self._send(batch, chain, result))
            if batch.is_stopped:
                return False
        return True

    async def _send(self, batch: KiraMessageBatchEvent, chain: MessageChain, result: TurnResult) -> KiraIMSentResult:
        result.sending = True  # left set if this is cancelled: the platform may already show the message
        sent = await self.send(batch.session, chain, batch)
        result.sending = False
        result.sent.append(sent)
        if (trace := current_trace()) is not None:  # trace
            trace.sent(sent.chain, sent.ok, sent.message_id, sent.error)
        return sent

    def _tag_failed(self, batch: KiraMessageBatchEvent) -> Callable[[BaseTag, BaseException], Awaitable[None]]:
        async def report(tag: BaseTag, exc: BaseException) -> None:
            owner = tag.owner or "core"
            logger.error("plugin %r tag <%s> failed: %s", owner, tag.name, exc, exc_info=exc)
            await self.engine.dispatch("exception", KiraExceptionEvent(exc, owner, f"tag:{tag.name}", "tag", batch))

        return report

    # -- tools ----------------------------------------------------------------------------------------------------

    async def _run_tools(
        self, batch: KiraMessageBatchEvent, tool_set: ToolSet, calls: list[ToolCall], seen: dict[str, int]
    ) -> list[ToolResult]:
        """Run the step's calls concurrently, in a task group this step owns; every failure becomes an error result
        the model sees. Results keep the order of the calls."""
        results: list[ToolResult | None] = [None] * len(calls)

        run_tool = self._run_tool if current_trace() is None else self._run_tool_traced  # trace

        async def run(index: int, call: ToolCall) -> None:
            results[index] = await run_tool(batch, tool_set, call, seen)

        async with anyio.create_task_group() as group:
            for index, call in enumerate(calls):
                group.start_soon(run, index, call)
        done = [r for r in results if r is not None]
        for r in done:
            batch.tool_attachments.extend(r.attachments)
        return done

    async def _run_tool_traced(
        self, batch: KiraMessageBatchEvent, tool_set: ToolSet, call: ToolCall, seen: dict[str, int]
    ) -> ToolResult:
        """`_run_tool`, recorded in the turn's trace with its arguments, result and duration."""
        started = time.perf_counter_ns()
        result = await self._run_tool(batch, tool_set, call, seen)
        trace = current_trace()
        if trace is not None:
            tool = tool_set.get(call.name)
            trace.tool_call(
                call.name,
                tool.owner if tool is not None else None,
                call.arguments,
                started,
                result=result.text,
                is_error=result.is_error,
            )
        return result

    async def _run_tool(
        self, batch: KiraMessageBatchEvent, tool_set: ToolSet, call: ToolCall, seen: dict[str, int]
    ) -> ToolResult:
        def error(text: str) -> ToolResult:
            return ToolResult(text=text, is_error=True, tool_name=call.name, arguments=call.arguments, call_id=call.id)

        tool = tool_set.get(call.name)
        if tool is None:
            return error(f"error: there is no tool called {call.name!r}; available: {', '.join(tool_set.names())}")
        if not isinstance(call.arguments, dict):
            return error("error: tool arguments must be a JSON object")
        if call.raw_arguments and call.arguments == {} and call.raw_arguments.strip() not in ("", "{}"):
            try:
                json.loads(call.raw_arguments)
            except ValueError:
                return error(f"error: the arguments are not valid JSON: {call.raw_arguments[:200]!r}")
        timeout = min(tool.timeout or self.settings.tool_timeout, self.settings.max_tool_timeout)
        current_tool_call.set(call)  # this task only (each call runs in its own task): remote tools read it
        try:
            with anyio.fail_after(timeout):
                # In a worker thread, under the tool's deadline: a huge or pathological argument cannot block
                # the loop (patterns are bounded too, see core.utils.json_schema).
                problems = await anyio.to_thread.run_sync(
                    schema_errors, tool.parameters, call.arguments, abandon_on_cancel=True
                )
                if problems:
                    return error(f"error: invalid arguments for {call.name}: {'; '.join(problems)}")
                key = f"{call.name}\x00{json.dumps(call.arguments, sort_keys=True, default=str)}"
                seen[key] = seen.get(key, 0) + 1
                if seen[key] > MAX_IDENTICAL_CALLS:
                    return error(
                        f"error: {call.name} was already called {MAX_IDENTICAL_CALLS} times with these exact "
                        "arguments in this turn; use the earlier results instead of calling it again"
                    )
                output = await tool.invoke(batch, dict(call.arguments))
            result = await apply_picture_budget(to_tool_result(output))
        except TimeoutError:
            logger.error("tool %s (plugin %r) timed out after %g s", call.name, tool.owner, timeout)
            return error(f"error: the tool {call.name} did not answer within {timeout:g} s")
        except UnusableSchemaError as exc:  # a `$ref` the schema cannot resolve: the tool's fault, not the model's
            logger.error("tool %s (plugin %r): its parameters schema cannot be used: %s", call.name, tool.owner, exc)
            return error(f"error: the tool {call.name} cannot be called: its parameters schema is broken")
        except Exception as exc:
            logger.exception("tool %s (plugin %r) raised", call.name, tool.owner)
            return error(f"error: the tool {call.name} failed: {type(exc).__name__}: {exc}")
        except BaseException as exc:  # SystemExit, KeyboardInterrupt, ... of the tool's code: its failure too
            if must_propagate(exc):
                raise
            logger.error(
                "tool %s (plugin %r) raised %s at %s",
                call.name,
                tool.owner,
                type(exc).__name__,
                raised_at(exc),
                exc_info=exc,
            )
            return error(f"error: the tool {call.name} failed: {type(exc).__name__}: {exc}")
        result.tool_name, result.arguments, result.call_id = call.name, call.arguments, call.id
        return result


def to_tool_result(output: Any) -> ToolResult:
    """Normalise what a tool returned: a `ToolResult`, a str, `{"output", "is_error", "error"}`, or JSON data."""
    if isinstance(output, ToolResult):
        output.attachments = list(output.attachments)
        return output
    if isinstance(output, str):
        return ToolResult(text=output)
    if isinstance(output, dict) and "is_error" in output and ("output" in output or "error" in output):
        is_error = bool(output.get("is_error"))
        body = output.get("output")
        text = body if isinstance(body, str) else _json(body) if body is not None else ""
        if is_error and output.get("error"):
            text = f"error: {output['error']}" + (f"\n{text}" if text else "")
        return ToolResult(text=text, is_error=is_error)
    if output is None:
        return ToolResult(text="")
    return ToolResult(text=_json(output))


def _make_valid(resp: LLMResponse) -> None:
    """The model's output as valid Unicode (a lone surrogate from a `\\ud83d` escape or a cut stream is replaced),
    so history stores it and tool names and arguments can be encoded."""
    resp.text_response = valid_text(resp.text_response)
    for call in resp.tool_calls:
        call.name = valid_text(call.name)
        if call.raw_arguments is not None and not call.raw_arguments.isascii():
            call.raw_arguments = valid_text(call.raw_arguments)
            arguments = json.dumps(call.arguments, ensure_ascii=False)
            if valid_text(arguments) is not arguments:
                call.arguments = json.loads(valid_text(arguments))


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _sent_text(sent: list[KiraIMSentResult]) -> str:
    return "\n".join(r.chain.message_repr for r in sent)


_MSG_END = re.compile(r"</\s*msg\s*>", re.IGNORECASE)
_THINK = re.compile(r"<\s*think\b.*?(?:<\s*/\s*think\s*>|$)", re.IGNORECASE | re.DOTALL)
_MARKUP = re.compile(r"<[^<>]*>|<[^<>]*$")


def _after_last_message(raw: str) -> str:
    """The output after the last `</msg>`: the message still being written."""
    ends = list(_MSG_END.finditer(raw))
    return raw[ends[-1].end() :] if ends else raw


def visible_draft(raw: str) -> str:
    """What a person would see of a message still being written: markup and `<think>` removed, entities
    decoded. A preview only: the finished message is parsed properly and sent whole."""
    return html.unescape(_MARKUP.sub("", _THINK.sub("", raw))).strip()
