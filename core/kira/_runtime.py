"""The managers KiraAI puts on a plugin's context, as thin facades over hookchat's own parts.

Each facade has the methods KiraAI plugins call on KiraAI's manager of that name; a method hookchat cannot honour
raises `NotSupportedHere` naming it. Everything goes through hookchat's one path for it: messages are sent with
`app.send` (so `message_sent` signals fire), incoming events enter `app.receive`, history is the `HistoryStore`.
KiraAI's history methods are synchronous, and so are they here (the caller waits for the history database); their
answers may also be awaited.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import ValidationError

from core.adapter.adapter_utils import IMAdapter
from core.chat import (
    AdapterInfo,
    KiraCustomEvent,
    KiraIMMessage,
    KiraIMSentResult,
    KiraMessageBatchEvent,
    KiraMessageEvent,
    MessageChain,
    Received,
    Session,
)
from core.chat.session import SessionIdError
from core.history import HistoryStore, SessionHistory
from core.kira._config import KiraConfigView
from core.kira._stickers import StickerManager
from core.plugin import (
    KiraAdapterManager,
    KiraEventBus,
    KiraMessageProcessor,
    NotSupportedHere,
    custom_event_name,
)
from core.provider.llm import ChatMessage, OpenAIMessage, ToolCall
from core.services import PluginHost

if TYPE_CHECKING:  # annotations of the KiraApp protocol (and of `ProviderManagerFacade`'s clients) only
    from core.adapter import Adapter
    from core.config import HookchatConfig
    from core.kira._clients import OneBotClient
    from core.plugin import PluginLoader
    from core.provider import LLMProvider
    from core.provider.agent import AgentLoop
    from core.provider.model_client import LLMModelClient, ModelInfo

__all__ = [
    "KiraApp",
    "KiraRuntimeImpl",
    "MessageProcessorFacade",
    "SessionBufferView",
    "AdapterManagerFacade",
    "AdapterView",
    "SessionManagerFacade",
    "ProviderManagerFacade",
    "ProviderInfo",
    "PersonaManagerFacade",
    "PersonaInfo",
    "EventBusFacade",
    "MustAwait",
]

logger = logging.getLogger("hookchat.kira")


class KiraApp(PluginHost, Protocol):
    """What the facades use of the running application (`core.app.KiraApp` implements it): the plugin host's
    send path, buffers and turns, plus the parts KiraAI's managers expose."""

    config: HookchatConfig
    adapters: dict[str, Adapter]
    plugins: PluginLoader
    provider: LLMProvider
    history: SessionHistory | None

    @property
    def agent(self) -> AgentLoop:
        """The agent loop that runs the turns (its settings hold the persona section)."""
        ...

    async def receive(self, message: KiraIMMessage) -> Received:
        """Deliver an incoming message to the pipeline."""
        ...


class MustAwait:
    """The result of a KiraAI history method under a cluster worker's shared history, where it must be awaited.

    Used without `await` (iterated, indexed, tested, read) it raises a `TypeError` naming the method, and if it
    is never awaited a warning says the call did nothing.
    """

    __slots__ = ("_coro", "_method", "_awaited")

    def __init__(self, coro: Coroutine[Any, Any, Any], method: str) -> None:
        self._coro = coro
        self._method = method
        self._awaited = False

    def __await__(self) -> Generator[Any, None, Any]:
        self._awaited = True
        return self._coro.__await__()

    def _refuse(self, *_: Any) -> Any:
        self._awaited = True
        self._coro.close()
        raise TypeError(
            f"{self._method} must be awaited under a cluster worker (its history is on NATS, read on "
            f"the event loop): write `await ctx.{self._method}(...)` (docs/kira-compat.md)"
        )

    __iter__ = __len__ = __getitem__ = __bool__ = __contains__ = _refuse

    def __getattr__(self, name: str) -> Any:
        return self._refuse()

    def __del__(self) -> None:
        if not self._awaited:
            self._coro.close()
            logger.warning(
                "%s was called without await: it did nothing (await it under a cluster worker)", self._method
            )


def _unsupported(method: str, why: str) -> Any:
    def refuse(self: Any, *args: Any, **kwargs: Any) -> Any:
        raise NotSupportedHere(method, why)

    refuse.__doc__ = f"Not supported here ({why})."
    return refuse


def _none(kind: str) -> Any:
    def get(self: Any) -> Any:
        raise ValueError(f"default_{kind} not set: hookchat has no {kind} models")

    get.__doc__ = f"Raises ValueError: hookchat has no {kind} models."
    return get


def _parse_sid(session: str) -> Session:
    try:
        return Session.from_sid(session)
    except SessionIdError:
        raise ValueError("invalid target, must follow the form of <adapter>:<dm|gm>:<id>") from None


# -- message processor ---------------------------------------------------------------------------------------------


class SessionBufferView:
    """One session's message buffer, KiraAI's `SessionBuffer`: the messages waiting for the debounce."""

    def __init__(self, app: KiraApp, sid: str) -> None:
        self._app = app
        self.sid = sid
        self.lock = asyncio.Lock()

    @property
    def buffer(self) -> list[KiraMessageEvent]:
        """The buffered message events, oldest first (a copy: use `add`, `pop` and `flush` to change it)."""
        return self._app.buffers.peek(self.sid)

    def get_length(self) -> int:
        """How many messages are buffered."""
        return self._app.buffers.size(self.sid)

    def get_buffer_lock(self) -> asyncio.Lock:
        """A lock a plugin may hold while it reads and changes this buffer."""
        return self.lock

    def add(self, message: KiraMessageEvent) -> None:
        """Buffer another message event of this session."""
        if message.sid != self.sid:
            raise ValueError(f"message of {message.sid} cannot go into the buffer of {self.sid}")
        self._app.buffers.append(message)

    def pop(self, count: int = 1) -> list[KiraMessageEvent]:
        """Remove and return the `count` oldest messages (all of them when fewer are buffered)."""
        buffers = self._app.buffers
        taken = buffers.peek(self.sid)[: max(0, count)]
        for event in taken:
            buffers.remove(event)
        return taken

    def flush(self, count: int | None = None) -> list[KiraMessageEvent]:
        """Remove and return the `count` oldest messages, or all; no turn runs for them (that is
        `message_processor.flush_session_messages`)."""
        return self.pop(count if count else self.get_length())


class _SessionBuffers:
    def __init__(self, app: KiraApp) -> None:
        self._app = app
        self._views: dict[str, SessionBufferView] = {}

    def get_buffer(self, session: str) -> SessionBufferView:
        """The buffer of session `session` (`adapter:dm|gm:id`)."""
        view = self._views.get(session)
        if view is None:
            view = self._views[session] = SessionBufferView(self._app, session)
        return view


class MessageProcessorFacade:
    """KiraAI's `MessageProcessor`: session buffers, flushing a session into a turn, sending a chain."""

    def __init__(self, app: KiraApp) -> None:
        self._app = app
        self.session_buffer = _SessionBuffers(app)
        self._locks: dict[str, asyncio.Lock] = {}

    def get_session_buffer_length(self, sid: str) -> int:
        """How many messages session `sid` has buffered."""
        return self._app.buffers.size(sid)

    def get_session_lock(self, sid: str) -> asyncio.Lock:
        """A lock per session a plugin may hold around its own sends."""
        return self._locks.setdefault(sid, asyncio.Lock())

    async def pop_session_messages(self, sid: str, count: int = 1) -> None:
        """Drop the `count` oldest buffered messages of `sid`."""
        self.session_buffer.get_buffer(sid).pop(count)

    async def flush_session_messages(self, sid: str, extra_event: KiraMessageEvent | None = None) -> bool:
        """Turn the buffer of `sid` (plus `extra_event`) into a batch for the model now; False when empty.

        The turn is queued for the session like any other (it runs after the session's current turn); this does
        not wait for it.
        """
        if extra_event is not None:
            self._app.buffers.append(extra_event)
        return self._app.flush(sid) is not None

    async def send_message_chain(self, session: str, chain: MessageChain) -> KiraIMSentResult:
        """Send `chain` to `adapter:dm|gm:id` through the app's send path; returns what the adapter said."""
        target = _parse_sid(session)
        return await self._app.send(target, chain if isinstance(chain, MessageChain) else MessageChain(chain))

    async def message_format_to_text(self, message_chain: MessageChain) -> str:
        """The chain as the model reads it (`message_repr`; KiraAI's richer media rendering is not done here)."""
        return MessageChain(message_chain).message_repr

    async def handle_im_message(self, event: KiraMessageEvent) -> None:
        """Inject a message into the pipeline, as if its adapter had delivered it: `im_message` hooks run and choose
        its strategy (a turn it causes runs on its session's queue; this does not wait for it)."""
        if not isinstance(event, KiraMessageEvent):
            raise TypeError(f"message_processor.handle_im_message takes a KiraMessageEvent, not {type(event).__name__}")
        await self._app.receive(event.message)

    handle_event = _unsupported("message_processor.handle_event", "deliver events with event_bus.publish")
    handle_im_batch_message = _unsupported("message_processor.handle_im_batch_message", "use event_bus.publish")
    send_xml_messages = _unsupported(
        "message_processor.send_xml_messages", "the agent loop parses and sends the model's output"
    )


# -- adapters --------------------------------------------------------------------------------------------------


class AdapterView(IMAdapter):
    """A hookchat adapter as KiraAI's `IMAdapter`; sending goes through the app's send path."""

    def __init__(self, app: KiraApp, adapter: Adapter, info: AdapterInfo) -> None:
        super().__init__(info, sorted(adapter.capabilities))
        self._app = app
        self.adapter = adapter

    async def send_group_message(self, group_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send to the group `group_id` of this adapter."""
        return await self._app.send(Session(self.info.name, "gm", str(group_id)), MessageChain(send_message_obj))

    async def send_direct_message(self, user_id: str | int, send_message_obj: MessageChain) -> KiraIMSentResult:
        """Send to the user `user_id` of this adapter in a direct chat."""
        return await self._app.send(Session(self.info.name, "dm", str(user_id)), MessageChain(send_message_obj))

    def get_client(self) -> OneBotClient:
        """The platform's client: for a OneBot (QQ) adapter KiraAI's NapCat client shape (`await
        client.send_action(action, params, timeout=10.0) -> dict`) on the adapter's connection. Other adapters have
        no platform client here (`NotSupportedHere`)."""
        # Imported here: the OneBot adapter (and websockets) loads only for a bot that has one, not with core.app.
        from core.adapter.onebot import OneBotAdapter
        from core.kira._clients import OneBotClient

        if isinstance(self.adapter, OneBotAdapter):
            return OneBotClient(self.adapter)
        raise NotSupportedHere(
            "adapter.get_client",
            f"the {type(self.adapter).__name__} adapter has no platform client; OneBot (QQ) has one",
        )

    def publish(self, message: Any) -> None:
        """Not supported: incoming messages enter with `await ctx.event_bus.publish(event)`."""
        raise NotSupportedHere("adapter.publish", "use await ctx.event_bus.publish(event)")

    async def start(self) -> None:
        """Not supported: the application starts its adapters."""
        raise NotSupportedHere("adapter.start", "the application starts and stops its adapters")

    async def stop(self) -> None:
        """Not supported: the application stops its adapters."""
        raise NotSupportedHere("adapter.stop", "the application starts and stops its adapters")


class AdapterManagerFacade:
    """KiraAI's `AdapterManager`: the running adapters by name and their info."""

    def __init__(self, app: KiraApp) -> None:
        self._app = app

    def _info(self, name: str) -> AdapterInfo:
        for instance in self._app.config.adapters.instances:
            if instance.adapter_name == name:
                return AdapterInfo(instance.enabled, name, name, instance.type, "", dict(instance.options))
        adapter = self._app.adapters.get(name)
        return AdapterInfo.named(name, type(adapter).__name__ if adapter is not None else "")

    def get_adapter(self, name: str) -> AdapterView | None:
        """The running adapter called `name` (the first part of session ids), or None."""
        adapter = self._app.adapters.get(name)
        return AdapterView(self._app, adapter, self._info(name)) if adapter is not None else None

    def get_adapters(self) -> dict[str, AdapterView]:
        """Every running adapter, by name."""
        return {name: AdapterView(self._app, a, self._info(name)) for name, a in self._app.adapters.items()}

    def get_adapter_info(self, adapter_id: str) -> AdapterInfo | None:
        """The info of the adapter `adapter_id` (its name here), configured or running; None when unknown."""
        known = {a.adapter_name for a in self._app.config.adapters.instances} | set(self._app.adapters)
        return self._info(adapter_id) if adapter_id in known else None

    def get_adapters_info(self) -> list[AdapterInfo]:
        """The info of every configured or running adapter."""
        names = dict.fromkeys([*(a.adapter_name for a in self._app.config.adapters.instances), *self._app.adapters])
        return [self._info(n) for n in names]

    get_adapter_infos = get_adapters_info
    _WHY = "adapters are configured in [adapters] of hookchat.toml"
    create_adapter = _unsupported("adapter_mgr.create_adapter", _WHY)
    update_adapter = _unsupported("adapter_mgr.update_adapter", _WHY)
    delete_adapter = _unsupported("adapter_mgr.delete_adapter", _WHY)
    register_adapter = _unsupported("adapter_mgr.register_adapter", _WHY)
    start_adapter = _unsupported("adapter_mgr.start_adapter", "the application starts its adapters")
    stop_adapter = _unsupported("adapter_mgr.stop_adapter", "the application stops its adapters")
    stop_adapters = _unsupported("adapter_mgr.stop_adapters", "the application stops its adapters")
    get_adapter_class = _unsupported("adapter_mgr.get_adapter_class", "adapter types are entry points")
    get_adapter_types = _unsupported("adapter_mgr.get_adapter_types", "adapter types are entry points")


# -- sessions and history ------------------------------------------------------------------------------------------


def _to_kira_dict(message: ChatMessage) -> dict[str, Any]:
    return message.to_openai()


def _from_kira_dict(item: dict[str, Any] | OpenAIMessage | ChatMessage) -> ChatMessage:
    if isinstance(item, ChatMessage):
        return item
    if not isinstance(item, OpenAIMessage):
        try:
            item = OpenAIMessage.model_validate(item)
        except ValidationError as exc:
            raise ValueError(f"not an OpenAI chat message: {item!r} ({exc.errors()[0]['msg']})") from None
    data = item.to_dict()
    content = data.get("content")
    if isinstance(content, list):  # content parts: history keeps their text
        content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
    calls = []
    for call in data.get("tool_calls") or []:
        function = call.get("function") or {}
        raw = function.get("arguments") or "{}"
        try:
            arguments = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except ValueError:
            arguments = {}
        calls.append(
            ToolCall(function.get("name", ""), arguments, call.get("id") or "", raw if isinstance(raw, str) else None)
        )
    return ChatMessage(
        data["role"], "" if content is None else str(content), calls, data.get("tool_call_id"), data.get("name")
    )


class AwaitableList(list):
    """A list that may also be awaited (to itself): what KiraAI's synchronous history methods return here, so
    KiraAI plugins use it plainly and code written for hookchat's earlier `await` form keeps working."""

    def __await__(self) -> Generator[Any, None, Any]:
        return self
        yield  # pragma: no cover - makes this a generator


class AwaitableInt(int):
    """An int that may also be awaited (to itself); see `AwaitableList`."""

    def __await__(self) -> Generator[Any, None, Any]:
        return self
        yield  # pragma: no cover


class _Done:
    """What a history write returns: nothing (as in KiraAI), awaitable for code that awaits it."""

    __slots__ = ()

    def __await__(self) -> Generator[Any, None, None]:
        return None
        yield  # pragma: no cover

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "None"


DONE = _Done()


def _run_blocking(make: Callable[[], Coroutine[Any, Any, Any]], method: str) -> Any:
    """Run `make()` to its end on an event loop of its own in a short-lived thread, and return its result.

    KiraAI's history methods are synchronous, so its plugins call them plainly, often from inside a hook; the
    history store answers on whichever loop asks, so the calling thread (the app's loop too) simply waits for the
    database, as it waits for KiraAI's file. Works inside and outside a running loop and from any thread.
    """
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = asyncio.run(make())
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=run, name=f"hookchat {method}")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


class SessionManagerFacade:
    """KiraAI's `SessionManager` over hookchat's history: session info, and the session's history as KiraAI's
    "memory" (a list of turns, each a list of OpenAI message dicts).

    As in KiraAI every method is a plain call that returns its answer (the caller waits for the database); the
    answers may also be awaited, which is the same. With a cluster worker's shared history (on NATS, the app's own
    loop) a plain call cannot wait without stopping that loop, so there the history methods must be awaited and a
    plain use raises `TypeError` saying so. Titles and descriptions set with `update_session_info` live in this
    process only.
    """

    def __init__(self, app: KiraApp) -> None:
        self._app = app
        self._info: dict[str, tuple[str | None, str | None]] = {}

    def _history(self, method: str) -> SessionHistory:
        if self._app.history is None:
            raise NotSupportedHere(f"session_mgr.{method}", "this application keeps no history")
        return self._app.history

    def _call(self, method: str, make: Callable[[SessionHistory], Coroutine[Any, Any, Any]]) -> Any:
        history = self._history(method)
        if not isinstance(history, HistoryStore):
            return MustAwait(make(history), f"session_mgr.{method}")
        value = _run_blocking(lambda: make(history), f"session_mgr.{method}")
        if value is None:
            return DONE
        if isinstance(value, list):
            return AwaitableList(value)
        return AwaitableInt(value) if isinstance(value, int) else value

    def _session(self, sid: str) -> Session:
        base = _parse_sid(sid)
        title, description = self._info.get(sid, (None, None))
        return Session(base.adapter_name, base.session_type, base.session_id, title, description)

    def get_session_info(self, session: str | None = None) -> Any:
        """The `Session` of `session` (`adapter:dm|gm:id`) with its title and description; without an argument,
        a list of every session that has history."""
        if session is not None:
            return self._session(session)

        async def every(history: SessionHistory) -> list[Session]:
            return [self._session(sid) for sid in await history.sessions()]

        return self._call("get_session_info", every)

    def update_session_info(self, session: str, title: str | None = None, description: str | None = None) -> _Done:
        """Set a session's title and/or description (kept in this process); an empty value keeps the old one."""
        old_title, old_description = self._info.get(session, (None, None))
        self._info[session] = (title or old_title, description or old_description)
        return DONE

    def get_memory_count(self, session: str) -> Any:
        """How many turns the session's history holds."""

        async def count(history: SessionHistory) -> int:
            return len(await history.list_turns(session))

        return self._call("get_memory_count", count)

    def fetch_memory(self, session: str) -> Any:
        """The session's history as one list of OpenAI message dicts, oldest first (the window sent to the model)."""

        async def fetch(history: SessionHistory) -> list[dict[str, Any]]:
            return [_to_kira_dict(m) for m in await history.get_history(session)]

        return self._call("fetch_memory", fetch)

    def read_memory(self, session: str) -> Any:
        """Every stored turn of the session, oldest first, each a list of OpenAI message dicts (a copy: change the
        history with `write_memory`)."""

        async def read(history: SessionHistory) -> list[list[dict[str, Any]]]:
            return [[_to_kira_dict(m) for m in turn.messages] for turn in await history.list_turns(session)]

        return self._call("read_memory", read)

    def get_existing_memory_snapshot(self, session: str) -> Any:
        """Like `read_memory`, but None for a session without history (a plain None: not awaitable)."""

        async def snapshot(history: SessionHistory) -> list[list[dict[str, Any]]] | None:
            turns = await history.list_turns(session)
            return [[_to_kira_dict(m) for m in turn.messages] for turn in turns] if turns else None

        result = self._call("get_existing_memory_snapshot", snapshot)
        return None if result is DONE else result

    def write_memory(self, session: str, memory: list[list[dict[str, Any]]]) -> Any:
        """Replace the session's whole history with `memory` (turns of OpenAI message dicts).

        Every message is checked before anything is deleted, so malformed input loses nothing (`ValueError`).
        """
        turns = [[_from_kira_dict(m) for m in chunk] for chunk in memory]

        async def write(history: SessionHistory) -> None:
            await history.clear(session)
            for messages in turns:
                await history.append_turn(session, messages)

        return self._call("write_memory", write)

    def update_memory(self, session: str, new_chunk: list[dict[str, Any] | OpenAIMessage]) -> Any:
        """Append one turn (OpenAI message dicts or `OpenAIMessage`s) to the session's history."""
        messages = [_from_kira_dict(m) for m in new_chunk]

        async def update(history: SessionHistory) -> None:
            await history.append_turn(session, messages)

        return self._call("update_memory", update)

    def delete_session(self, session: str) -> Any:
        """Delete the session's history (and its title and description)."""
        self._info.pop(session, None)

        async def delete(history: SessionHistory) -> None:
            await history.clear(session)

        return self._call("delete_session", delete)


# -- providers -------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class ProviderInfo:
    """A configured provider, KiraAI's `ProviderInfo`."""

    provider_name: str
    provider_id: str
    provider_type: str
    provider_config: dict[str, Any]


class ProviderManagerFacade:
    """KiraAI's `ProviderManager`: the application's model as an `LLMModelClient`.

    hookchat runs one provider (the default of `[[providers]]`, or the embedded model); the fast and vision
    defaults are that same model. Other kinds of models (speech, images, video, embeddings, rerank) do not exist
    here: their `get_default_*` raises `ValueError("default_<kind> not set")`, as KiraAI does when one is not
    configured.
    """

    def __init__(self, app: KiraApp) -> None:
        self._app = app

    def _model(self, model_id: str | None = None) -> ModelInfo:
        # The model clients' module is imported by the first plugin that asks for one: its dataclasses are 0.6% of
        # a `hookchat plugins`, which asks for none (docs/performance.md).
        from core.provider.model_client import ModelInfo, ModelType

        chosen = self._app.config.provider()
        provider = self._app.provider
        name = chosen.name if chosen is not None else provider.name
        models = list(chosen.models) if chosen is not None else []
        config = {"base_url": chosen.base_url} if chosen is not None else {}
        return ModelInfo(ModelType.LLM, model_id or (models[0] if models else provider.name), name, name, config)

    def _client(self, model: ModelInfo) -> LLMModelClient:
        from core.provider.model_client import LLMModelClient  # with `_model`'s, on first use

        return LLMModelClient(self._app.provider, model)

    def get_default_llm(self) -> LLMModelClient:
        """The application's model."""
        return self._client(self._model())

    def get_default_fast_llm(self) -> LLMModelClient:
        """The application's model (hookchat has no separate fast model)."""
        return self.get_default_llm()

    def get_default_vlm(self) -> LLMModelClient:
        """The application's model (it is sent pictures inline; whether it reads them depends on the model)."""
        return self.get_default_llm()

    def get_model_client(self, provider_id: str, model_id: str, model_type: Any = None) -> LLMModelClient | None:
        """A client for `model_id` of the application's provider `provider_id`; None for another provider."""
        if provider_id != self._model().provider_id:
            return None
        return self._client(self._model(model_id))

    def get_provider_info(self, provider_id: str) -> ProviderInfo | None:
        """The configured provider `provider_id` (a `[[providers]]` name), or None."""
        for p in self._app.config.providers:
            if p.name == provider_id:
                return ProviderInfo(p.name, p.name, p.type, {"base_url": p.base_url, "models": list(p.models)})
        return None

    get_default_tts = _none("tts")
    get_default_stt = _none("stt")
    get_default_image = _none("image")
    get_default_video = _none("video")
    get_default_embedding = _none("embedding")
    get_default_rerank = _none("rerank")
    _WHY = "providers are configured in [[providers]] of hookchat.toml"
    register_provider = _unsupported("provider_mgr.register_provider", _WHY)
    register_model = _unsupported("provider_mgr.register_model", _WHY)
    update_model = _unsupported("provider_mgr.update_model", _WHY)
    delete_model = _unsupported("provider_mgr.delete_model", _WHY)
    set_provider = _unsupported("provider_mgr.set_provider", _WHY)
    get_provider = _unsupported("provider_mgr.get_provider", "use get_default_llm() or get_model_client()")
    get_all_providers = _unsupported("provider_mgr.get_all_providers", "use get_provider_info()")


# -- personas --------------------------------------------------------------------------------------------------


@dataclass(slots=True)
class PersonaInfo:
    """A persona, KiraAI's `PersonaInfo`: here the one the bot speaks as (the `persona` prompt section)."""

    id: str
    name: str | None = None
    format: str | None = None
    content: str | None = None
    created_at: int | None = None
    is_active: bool | None = None


class PersonaManagerFacade:
    """KiraAI's `PersonaManager`: hookchat has one persona, the `persona` section the operator configured."""

    def __init__(self, app: KiraApp) -> None:
        self._app = app

    def _persona(self) -> PersonaInfo:
        content = (self._app.agent.settings.sections or {}).get("persona", "")
        return PersonaInfo("default", "default", "text", content, None, True)

    async def get_persona(self, persona_id: str | None = None) -> PersonaInfo | None:
        """The persona (`persona_id` None or "default"), else None."""
        return self._persona() if persona_id in (None, "default") else None

    async def get_active_persona(self) -> PersonaInfo:
        """The persona the bot speaks as."""
        return self._persona()

    async def list_personas(self) -> list[PersonaInfo]:
        """The one persona."""
        return [self._persona()]

    _WHY = "the persona is the operator's configured prompt"
    update_persona = _unsupported("persona_mgr.update_persona", _WHY)
    create_persona = _unsupported("persona_mgr.create_persona", _WHY)
    delete_persona = _unsupported("persona_mgr.delete_persona", _WHY)
    set_active_persona = _unsupported("persona_mgr.set_active_persona", _WHY)


# -- the event bus ---------------------------------------------------------------------------------------------


class EventBusFacade:
    """KiraAI's `EventBus`: `await publish(event)` delivers a message event (through `im_message` and its
    strategy), a batch (queued as a turn of its session) or a custom event (to `custom_event` hooks)."""

    def __init__(self, app: KiraApp) -> None:
        self._app = app

    async def publish(self, event: Any) -> None:
        """Deliver `event`; returns once it is in the pipeline (a turn it causes runs on the session's queue)."""
        if isinstance(event, KiraMessageEvent):
            await self._app.receive(event.message)
        elif isinstance(event, KiraMessageBatchEvent):
            self._app.submit(event)
        elif isinstance(event, KiraCustomEvent):
            await self._app.plugins.engine.dispatch(custom_event_name(event.name), event)
        else:
            raise NotSupportedHere(
                f"event_bus.publish({type(event).__name__})", "message, batch and custom events can be published"
            )

    subscribe = _unsupported("event_bus.subscribe", "listen with @on hooks")
    unsubscribe = _unsupported("event_bus.unsubscribe", "listen with @on hooks")
    add_middleware = _unsupported("event_bus.add_middleware", "use @on.im_message hooks")


# -- the runtime -----------------------------------------------------------------------------------------------


class KiraRuntimeImpl:
    """Everything KiraAI-style plugins reach through their context, for one application (`core.plugin.KiraRuntime`)."""

    def __init__(self, app: KiraApp) -> None:
        self._app = app
        self.config = KiraConfigView(app)
        # Typed as the protocols core.plugin hands plugins, so the checker holds the facades to them.
        message_processor: KiraMessageProcessor = MessageProcessorFacade(app)
        adapter_mgr: KiraAdapterManager = AdapterManagerFacade(app)
        event_bus: KiraEventBus = EventBusFacade(app)
        self._managers: dict[str, object] = {
            "message_processor": message_processor,
            "adapter_mgr": adapter_mgr,
            "session_mgr": SessionManagerFacade(app),
            "provider_mgr": ProviderManagerFacade(app),
            "persona_mgr": PersonaManagerFacade(app),
            "event_bus": event_bus,
            "sticker_manager": StickerManager(Path(app.config.data.dir) / "sticker"),
        }

    def manager(self, name: str) -> object:
        """The facade for `name`; a manager hookchat has no facade for raises `NotSupportedHere` on use."""
        found = self._managers.get(name)
        if found is None:
            raise NotSupportedHere(f"ctx.{name}", "hookchat has no such manager")
        return found
