"""The application: one object that owns the hook engine, the plugins, the model provider, the history store,
the adapters and the message pipeline, and starts and stops them in order (`async with HookChat(config) as app`).
It is the `PluginHost` plugins and services see: the one send path, the session buffers, turns and history."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from core.adapter import ALL_ELEMENTS, Adapter
from core.builtins import BUILTIN_PLUGINS
from core.chat import (
    KiraEvent,
    KiraIMMessage,
    KiraIMSentResult,
    KiraLifecycleEvent,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    MessageStrategy,
    Received,
    Session,
    SessionBuffers,
    TurnResult,
)
from core.chat.message_elements import Text
from core.config import ConfigError, HookchatConfig
from core.history import HistoryStore, InboxEntry, SessionHistory
from core.kira import KiraRuntimeImpl
from core.mcp import McpManager
from core.pipeline import MessagePipeline, TurnScheduler, message_from_inbox
from core.plugin import HookEngine, PluginLoader
from core.provider import ChatMessage, LLMProvider
from core.provider.registry import build_provider
from core.services import PluginStoreLike, PushService
from core.tag import MediaPolicy
from core.trace import Tracer, default_file
from core.utils.clock import Clock, LoopClock
from core.utils.log import logger
from core.utils.path_utils import set_data_path
from core.utils.signals import message_sent, send
from core.utils.tasks import SHUTDOWN_GRACE, wait_or_abandon

if TYPE_CHECKING:
    from core.provider.agent import AgentLoop
    from core.server import ToolRegistryServer

__all__ = ["HookChat", "build_provider", "SAVED_SETTINGS_NAME", "read_saved_settings"]

#: Where plugin settings saved from the web console live, under the data directory. Every command reads them at
#: start (over `[plugins.config]` of hookchat.toml), so `hookchat run` after the console uses what was saved.
SAVED_SETTINGS_NAME = "web/plugin_config.json"


def read_saved_settings(data_dir: Path) -> dict[str, dict[str, Any]]:
    """The plugin settings saved from the web console (`{plugin_id: values}`); {} when none. A file that cannot
    be read is logged (naming it) and ignored, so the bot still starts with the settings of hookchat.toml."""
    path = Path(data_dir) / SAVED_SETTINGS_NAME
    if not path.is_file():
        return {}
    try:
        saved = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.error(
            "cannot read the plugin settings saved from the web console (%s): %s; they are not applied "
            "(fix or delete the file)",
            path,
            exc,
        )
        return {}
    if not isinstance(saved, dict):
        return {}
    return {str(pid): values for pid, values in saved.items() if isinstance(values, dict)}


def _media_policy(config: HookchatConfig) -> MediaPolicy:
    """The `[media]` consent for model-steered tags; `ConfigError` naming the key for an unusable entry."""
    media = config.media
    try:
        return MediaPolicy.from_settings(
            allow_mention_all=media.allow_mention_all, allowed_url_hosts=media.allowed_url_hosts
        )
    except ValueError as exc:
        raise ConfigError(
            f"{config.source}: {exc}", path=config.file, issues=[("media.allowed_url_hosts", str(exc))]
        ) from None


def _with_skills(builtins: tuple[str, ...], config: HookchatConfig) -> tuple[str, ...]:
    """The built-in plugins to load: `builtins`, and the `skills` plugin when the skills folder exists (an app
    without skills loads nothing for them)."""
    if "skills" in builtins or not config.skills.dir.is_dir():
        return builtins
    return (*builtins, "skills")


class HookChat:
    """The running bot. `plugins` adds plugin classes or folders to those found in the configured directories;
    `builtins` names the framework's own plugins to load (by default the chat debounce and the built-in tags)."""

    def __init__(
        self,
        config: HookchatConfig | None = None,
        *,
        provider: LLMProvider | None = None,
        adapters: Sequence[Adapter] = (),
        plugins: Sequence[type | str | Path] = (),
        history: bool | SessionHistory = True,
        entry_points: bool = True,
        builtins: Iterable[str] = BUILTIN_PLUGINS,
        serve_tools: bool = False,
        clock: Clock | None = None,
    ) -> None:
        self.config = config or HookchatConfig()
        #: The time the framework's timers follow (the chat plugin's debounce, idle sweeps); tests pass the
        #: testing kit's `ManualClock`.
        self.clock: Clock = clock or LoopClock()
        limits, deadlines = self.config.limits, self.config.deadlines
        self.data_dir = Path(self.config.data.dir)
        traces = self.config.trace
        self.tracer = Tracer(
            enabled=traces.enabled,
            ring_size=traces.ring_size,
            file=default_file(self.data_dir, traces.file),
            max_file_bytes=traces.max_file_bytes,
            otel=traces.otel,
        )
        self.engine = HookEngine(
            default_deadline=deadlines.hook_default, stall_threshold=deadlines.stall_threshold, tracer=self.tracer
        )
        self.plugins = PluginLoader(
            self.engine,
            plugin_dirs=list(self.config.plugins.dirs),
            data_dir=self.data_dir,
            plugin_config=dict(self.config.plugins.config),
            is_enabled=self.config.plugins.is_enabled,
            media_roots=list(self.config.media.allowed_dirs),
            media_policy=_media_policy(self.config),
            init_timeout=deadlines.plugin_start,
            private_paths=[self.config.file] if self.config.file is not None else [],
            entry_points=entry_points,
            builtins=_with_skills(tuple(builtins), self.config),
            config_source=self.config.source,
            app=self,
            kira=KiraRuntimeImpl(self),
        )
        self._extra_plugins = list(plugins)
        self.provider = provider if provider is not None else build_provider(self.config)
        self.adapters: dict[str, Adapter] = {a.name: a for a in adapters}
        self.history: SessionHistory | None = None
        self._agent: AgentLoop | None = None  # made at the first turn (`agent`)
        if not isinstance(history, bool):  # a store of the caller's (a cluster worker's shared history)
            self.history = history
        elif history:
            self.history = HistoryStore(
                self.config.data.history_path,
                max_turns=limits.history_turns,
                max_tokens=limits.history_tokens,
                retain_turns=limits.history_retain_turns,
            )
        self.scheduler = TurnScheduler(
            self._run_turn,
            limits.max_concurrent_turns,
            max_waiting=limits.max_waiting_messages,
            forget=self._forget,
            overflow=self._waiting_full,
        )
        self.pipeline = MessagePipeline(
            self.engine,
            self.scheduler,
            self.capabilities,
            max_buffered_sessions=limits.max_buffered_sessions,
            clock=self.clock,
            inbox=self.history,
        )
        self.push: PushService | None = PushService(self)
        self.tool_server: ToolRegistryServer | None = None
        if serve_tools:  # `hookchat run`: the HTTP tool registry on [server] host:port
            from core.server import ToolRegistryServer  # starlette and uvicorn: only for the commands that serve

            self.tool_server = ToolRegistryServer(self.config.server, self.plugins.tools, self.data_dir)
        #: The MCP servers of `[mcp]` as tool sources (docs/mcp.md); started after the plugins, so a plugin's tool
        #: keeps its name and a colliding MCP tool is renamed.
        self.mcp = McpManager(self.config, self.plugins.tools, data_dir=self.data_dir)
        #: Makes a plugin's `self.store` when it must live outside this process (a cluster worker sets it); None:
        #: each plugin's own SQLite file.
        self.store_factory: Callable[[str], PluginStoreLike] | None = None
        self._started = False

    @property
    def agent(self) -> AgentLoop:
        """The agent loop that runs the turns (model, tools, the output parsed and sent), made at its first use: a
        command that runs no turn (`hookchat plugins`) never loads it."""
        if self._agent is None:
            self._agent = self._make_agent()
        return self._agent

    def _make_agent(self) -> AgentLoop:
        # The agent loop's modules are imported here, with the first turn, not with the app (docs/performance.md).
        from core.provider.agent import AgentLoop, AgentSettings

        limits = self.config.limits
        return AgentLoop(
            self.engine,
            self.provider,
            self.send,
            tools=self.plugins.tools,
            tags=self.plugins.tags,
            history=self.history,
            drafts=self.drafts_for,
            typing=self.typing_for,
            settings=AgentSettings(
                max_steps=limits.max_steps,
                tool_timeout=limits.tool_timeout,
                max_tool_timeout=limits.max_tool_timeout,
                max_messages=limits.max_messages_per_turn,
                max_chars=limits.max_chars_per_turn,
            ),
        )

    # -- lifecycle ------------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open history, load plugins, start adapters, then fire `loaded`; if any of it fails, stop what started."""
        try:
            await self._start()
        except BaseException:
            await self.aclose()
            raise

    async def _start(self) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        set_data_path(self.data_dir)  # before any plugin is imported: KiraAI plugins read it at import time
        if self.history is not None:
            await self.history.open()
        if self.tool_server is not None:
            await self.tool_server.start()
        self.plugins.plugin_config.update(await anyio.to_thread.run_sync(read_saved_settings, self.data_dir))
        for item in self._extra_plugins:
            if isinstance(item, type):
                self.plugins.add_class(item)
            else:
                self.plugins.add_folder(item)
        await self.plugins.load_all()
        await self.mcp.start()
        for adapter in self.adapters.values():
            await adapter.start(self)
        if self.push is not None:
            await self.push.start()
        self._started = True
        await self.plugins.dispatch_loaded(None)
        await self._answer_unfinished()

    async def _answer_unfinished(self) -> None:
        """After a crash: the messages received and never answered (the inbox) are answered now, in arrival order,
        one batch per session, or, when older than `[limits] unanswered_max_age`, their senders are told the bot
        restarted. A message whose turns already ended the process `[limits] message_attempts` times is set aside
        as poison (kept, listed by `hookchat status`) and its sender told. Never silence: a message whose adapter
        is gone stays in the inbox, with a warning."""
        if self.history is None:
            return
        now = time.time()
        limits = self.config.limits
        if self.inbox is not None:
            entries = await self.inbox.waiting()
        else:  # a store of the caller's: no attempts are counted there
            entries = [InboxEntry(*row) for row in await self.history.unfinished()]
        by_session: dict[str, list[KiraMessageEvent]] = {}
        for entry in entries:
            inbox_id, sid = entry.id, entry.sid
            try:
                message = message_from_inbox(entry.message, entry.received_at)
            except (KeyError, ValueError, TypeError) as exc:
                logger.error("unanswered message %s of %s cannot be restored (%s): dropped", inbox_id, sid, exc)
                self.history.mark_done([inbox_id])
                continue
            session = message.session
            assert session is not None, "an inbox record names its session"
            if not self.serves(session):
                logger.warning(
                    "unanswered message %s of %s kept: no adapter %r serves it",
                    inbox_id,
                    sid,
                    session.adapter_name,
                )
                continue
            preview = message.message_repr[:80]
            if self.inbox is not None and entry.attempts >= limits.message_attempts:
                # Set aside (durably) before the notice goes out: if sending it ends the process too, the
                # message is not tried again at the next start.
                await self.inbox.set_aside([inbox_id])
                logger.error(
                    "message %s of %s set aside as poison: %d turn(s) for it ended the process (see "
                    "`hookchat status`; [limits] message_attempts)",
                    inbox_id,
                    sid,
                    entry.attempts,
                )
                await self.send(session, MessageChain([Text(limits.poison_notice.format(message=preview))]))
                continue
            if now - entry.received_at > limits.unanswered_max_age:
                notice = MessageChain([Text(limits.unanswered_notice.format(message=preview))])
                await self.send(session, notice)
                self.history.mark_done([inbox_id])
                continue
            event = KiraMessageEvent(message)
            event.inbox_id = inbox_id
            by_session.setdefault(sid, []).append(event)
        for events in by_session.values():
            logger.warning("answering %d message(s) of %s left unanswered by a restart", len(events), events[0].sid)
            self.pipeline.submit(KiraMessageBatchEvent(events, events[0].session))

    @property
    def inbox(self) -> HistoryStore | None:
        """This process's durable inbox, which counts attempts and keeps poison messages: the history store when
        it is the app's SQLite one (None without history, or with a store of the caller's, such as a cluster
        worker's, whose broker redelivers and bounds deliveries itself)."""
        return self.history if isinstance(self.history, HistoryStore) else None

    async def _run_turn(self, batch: KiraMessageBatchEvent) -> TurnResult:
        """The scheduler's turn: the attempt is counted durably for the batch's messages, then the agent runs."""
        if self.inbox is not None:
            await self.inbox.start_attempt([m.inbox_id for m in batch.messages if m.inbox_id is not None])
        return await self.agent.run_turn(batch)

    def _forget(self, batch: KiraMessageBatchEvent, why: str) -> None:
        """Messages no turn will answer (cancelled, reset, refused) leave the inbox, so a restart does not replay
        them, and their traces end."""
        self.tracer.drop(batch.messages, why)
        if self.history is not None:
            self.history.mark_done([m.inbox_id for m in batch.messages if m.inbox_id is not None])

    async def _waiting_full(self, session: Session, limit: int) -> None:
        """Tell a session that its waiting batch is full and later messages were refused."""
        await self.send(session, MessageChain([Text(self.config.limits.waiting_full_notice.format(limit=limit))]))

    @property
    def started(self) -> bool:
        """True between a successful `start()` and `aclose()`."""
        return self._started

    async def aclose(self) -> None:
        """Fire `shutdown`, stop turns, adapters and plugins, close history, the provider and the engine.

        Bounded by `[deadlines] shutdown_timeout`: each stage gets a share of the time left, and one that
        overruns it (a `terminate()` that never returns, a shutdown hook that ignores its cancellation) is
        abandoned with a log line, so the later stages still run and history is always closed. It runs in a task
        of its own: a cancellation of the caller (Ctrl-C under `asyncio.run`) cannot stop it half-way.
        """
        closing = asyncio.get_running_loop().create_task(self._aclose(), name="hookchat shutdown")
        try:
            await asyncio.shield(closing)
        except asyncio.CancelledError:
            await asyncio.wait({closing}, timeout=self.config.deadlines.shutdown_timeout)
            raise

    async def _aclose(self) -> None:
        timeout = self.config.deadlines.shutdown_timeout
        reserve = min(1.0, timeout / 4)  # kept for history, the provider and the engine
        deadline = time.monotonic() + timeout - reserve

        def left(share: float = 1.0) -> float:
            return max(deadline - time.monotonic(), 0.0) * share

        async def stage(work: Coroutine[Any, Any, Any], what: str, seconds: float) -> None:
            await wait_or_abandon(work, seconds * 0.8, what, grace=seconds * 0.2)

        if self._started:
            hooks = sum(entry.deadline for entry in self.engine.chain("shutdown")) * 2 + SHUTDOWN_GRACE
            await stage(
                self.engine.dispatch("shutdown", KiraLifecycleEvent(None)),
                "the shutdown hooks",
                min(hooks, left(1 / 3)),
            )
        self._started = False
        if self.tool_server is not None:  # first: the remote registrations it stored stay stored
            await stage(self.tool_server.stop(), "the tool registry", min(SHUTDOWN_GRACE, left(1 / 4)))
        if self.push is not None:
            await stage(self.push.aclose(), "the push service", min(SHUTDOWN_GRACE, left(1 / 4)))
        await stage(
            self.scheduler.aclose(grace=min(SHUTDOWN_GRACE, left(1 / 5))),
            "the turn scheduler",
            min(SHUTDOWN_GRACE, left(1 / 4)),
        )
        for adapter in self.adapters.values():
            await stage(adapter.stop(), f"adapter {adapter.name!r}: stop()", min(SHUTDOWN_GRACE, left(1 / 4)))
        await stage(self.mcp.aclose(), "the MCP servers", min(SHUTDOWN_GRACE, left(1 / 4)))
        await self.plugins.shutdown(timeout=left())
        closing = min(SHUTDOWN_GRACE, max(left(), reserve))
        if self.history is not None:
            await stage(self.history.close(), "closing history", closing)
        await stage(self.provider.aclose(), "the model provider", closing / 2)
        await stage(self.engine.aclose(), "the hook engine", closing / 2)
        await anyio.to_thread.run_sync(self.tracer.close)  # it drains the trace file's writer thread

    async def __aenter__(self) -> HookChat:
        await self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- messages -------------------------------------------------------------------------------------------------

    async def receive(self, message: KiraIMMessage, *, inbox_id: str | None = None) -> Received:
        """Deliver an incoming platform message to the pipeline (adapters call this). `inbox_id`: the message is
        already held durably under this id elsewhere (a cluster worker), so the inbox does not record it."""
        return await self.pipeline.receive(message, inbox_id=inbox_id)

    async def respond(self, message: KiraIMMessage) -> TurnResult | None:
        """Deliver a message and wait for the turn it causes, flushing its session's buffer at once (as if the
        debounce had expired); None when no turn follows (discarded or stopped). The console and the testing kit
        use this: there, Enter ends a message."""
        received = await self.receive(message)
        turn = received.turn
        if turn is None and received.strategy is MessageStrategy.BUFFER and message.session is not None:
            turn = self.pipeline.flush(message.session)  # receive() gave the message its session
        return await turn if turn is not None else None

    def add_adapter(self, adapter: Adapter) -> None:
        """Register an adapter (start it yourself if the app is running)."""
        self.adapters[adapter.name] = adapter

    # -- the plugin host: what plugins and services may use ----------------------------------------------------------

    @property
    def buffers(self) -> SessionBuffers:
        """The per-session buffers of the `buffer` strategy."""
        return self.pipeline.buffers

    def serves(self, session: Session) -> bool:
        """Whether one of this app's adapters serves `session`."""
        return session.adapter_name in self.adapters

    def drafts_for(self, session: Session) -> Callable[[str], Awaitable[None]] | None:
        """Where to show the message being written for `session`: its adapter's `draft`, when it shows drafts."""
        adapter = self.adapters.get(session.adapter_name)
        if adapter is None or not adapter.drafts:
            return None
        return lambda text: adapter.draft(session, text)

    def typing_for(self, session: Session) -> AbstractAsyncContextManager[None]:
        """What shows that the bot is writing to `session` while the model works: its adapter's `typing`."""
        adapter = self.adapters.get(session.adapter_name)
        return adapter.typing(session) if adapter is not None else contextlib.nullcontext()

    def capabilities(self, session: Session) -> frozenset[str]:
        """The element types the session's adapter can send."""
        adapter = self.adapters.get(session.adapter_name)
        return adapter.capabilities if adapter is not None else ALL_ELEMENTS

    def flush(self, session: Session | str) -> asyncio.Future[TurnResult] | None:
        """Turn everything buffered for `session` into one batch now (the debounce timer calls this)."""
        return self.pipeline.flush(session)

    def submit(self, batch: KiraMessageBatchEvent) -> asyncio.Future[TurnResult]:
        """Queue `batch` as a turn of its session, like any batch the pipeline makes."""
        return self.pipeline.submit(batch)

    def cancel_turn(self, session: Session | str) -> bool:
        """Cancel the turn running for `session` (its later turns still run); False when none is running."""
        return self.scheduler.cancel(session if isinstance(session, str) else session.sid)

    async def reset(self, session: Session | str) -> int:
        """Forget a conversation: delete the session's history and drop the messages waiting for an answer (its
        buffer and its waiting batch), which leave the inbox too, so a restart does not answer them. Returns how
        many stored turns were deleted. The turn running now (if any) still finishes and is stored."""
        sid = session if isinstance(session, str) else session.sid
        buffered = self.pipeline.buffers.drain(sid)
        if buffered:
            self._forget(KiraMessageBatchEvent(buffered, buffered[-1].session), "dropped by a reset")
        self.scheduler.drop_waiting(sid)
        return await self.history.clear(sid) if self.history is not None else 0

    @property
    def has_history(self) -> bool:
        """Whether this app keeps history."""
        return self.history is not None

    async def remember(self, session: Session, text: str, meta: dict[str, object]) -> None:
        """Append `text` to the session's history as a user message the model reads next turn."""
        if self.history is not None:
            await self.history.append_turn(session.sid, [ChatMessage("user", text)], meta=dict(meta))

    def shared_store(self, plugin_id: str) -> PluginStoreLike | None:
        """The store of plugin `plugin_id` when this app keeps plugin stores outside the process (a cluster
        worker); None for the default, the plugin's own SQLite file."""
        return self.store_factory(plugin_id) if self.store_factory is not None else None

    @property
    def tool_server_running(self) -> bool:
        """Whether this app serves the HTTP tool registry right now."""
        return self.tool_server is not None and self.tool_server.running

    async def clear_remote_tools(self, source: str) -> bool:
        """Remove the remote tools of `source` from the running tool registry (memory and its database); False
        when this app serves no registry."""
        server = self.tool_server
        if server is None or not server.registry.is_open:
            return False
        await server.registry.clear(source)
        return True

    async def send(self, session: Session, chain: MessageChain, event: KiraEvent | None = None) -> KiraIMSentResult:
        """The one send path of every message the bot sends (agent replies, pushes, plugins): the session's adapter
        sends it, then `message_sent` hooks run with `(event, result)` (for a send outside a turn, an empty batch
        of the session) and the `message_sent` signal fires. Never raises for an adapter's failure: the result
        says `ok=False` and why."""
        adapter = self.adapters.get(session.adapter_name)
        if adapter is None:
            result = KiraIMSentResult(chain, session, ok=False, error=f"no adapter called {session.adapter_name!r}")
        else:
            try:
                result = await adapter.send_in_turn(session, chain, event)
                if isinstance(event, KiraMessageBatchEvent):
                    event.sends += 1
            except Exception as exc:  # an adapter that raises is reported, not fatal
                logger.exception("sending to %s failed", session.sid)
                result = KiraIMSentResult(chain, session, ok=False, error=f"{type(exc).__name__}: {exc}")
        await self.engine.dispatch(
            "message_sent", event if event is not None else KiraMessageBatchEvent([], session), result
        )
        send(message_sent, self, session=session, chain=chain, result=result)
        return result
