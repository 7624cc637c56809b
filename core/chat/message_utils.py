"""Messages and the events hooks receive: `MessageChain`, `KiraIMMessage`, `KiraMessageEvent` with its strategy
methods, `KiraMessageBatchEvent`, and the result and notification events of the pipeline.

KiraAI's names are accepted as well: `chain.message_list`, `is_group_message()`, `message.self_id` and
`is_notice`, the events' `adapter=` / `message_types=` / `timestamp=` keywords, and `message_str` (the text the
model reads for a message, which a hook may rewrite) on every message of a batch.
"""

from __future__ import annotations

import enum
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from core.chat.message_elements import (
    ELEMENT_TYPES,
    At,
    BaseMessageElement,
    Emoji,
    File,
    Image,
    Poke,
    Record,
    Reply,
    Text,
)
from core.chat.session import AdapterInfo, Group, Session, User

__all__ = [
    "MessageChain",
    "MessageChains",
    "MessageStrategy",
    "KiraEvent",
    "KiraIMMessage",
    "KiraMessageEvent",
    "KiraMessageBatchEvent",
    "KiraIMSentResult",
    "KiraStepResult",
    "KiraExceptionEvent",
    "KiraCustomEvent",
    "KiraLifecycleEvent",
    "User",
    "Group",
    "Session",
    "AdapterInfo",
]


class MessageChain(list):
    """An ordered list of message elements: one message. A plain `list` with fluent builders and text helpers."""

    def __init__(self, elements: Iterable[BaseMessageElement] = ()) -> None:
        super().__init__(elements)

    def text(self, text: str) -> MessageChain:
        """Append a `Text` element; returns the chain for chaining."""
        self.append(Text(text))
        return self

    def at(self, user_id: str, nickname: str | None = None) -> MessageChain:
        """Append an `At` mention."""
        self.append(At(user_id, nickname))
        return self

    def reply(self, message_id: str) -> MessageChain:
        """Append a `Reply` quote."""
        self.append(Reply(message_id))
        return self

    def image(self, url: str | None = None, *, path: str | None = None, base64: str | None = None) -> MessageChain:
        """Append an `Image`."""
        self.append(Image(url=url, path=path, base64=base64))
        return self

    def record(self, url: str | None = None, *, path: str | None = None, base64: str | None = None) -> MessageChain:
        """Append a `Record` (voice)."""
        self.append(Record(url=url, path=path, base64=base64))
        return self

    def file(self, url: str | None = None, *, path: str | None = None, name: str | None = None) -> MessageChain:
        """Append a `File`."""
        self.append(File(url=url, path=path, name=name))
        return self

    def emoji(self, emoji_id: str) -> MessageChain:
        """Append an `Emoji`."""
        self.append(Emoji(emoji_id))
        return self

    def poke(self, user_id: str) -> MessageChain:
        """Append a `Poke`."""
        self.append(Poke(user_id))
        return self

    @property
    def chain(self) -> MessageChain:
        """The chain itself, so `message.chain` and `chain` read the same."""
        return self

    @property
    def message_list(self) -> MessageChain:
        """KiraAI's name for the elements: the chain itself, so changes to it change the message."""
        return self

    @message_list.setter
    def message_list(self, elements: Iterable[BaseMessageElement]) -> None:
        self[:] = list(elements)

    def is_empty(self) -> bool:
        """True when the chain has no element."""
        return not self

    @property
    def plain_text(self) -> str:
        """The concatenated text of the `Text` elements only."""
        return "".join(e.text for e in self if isinstance(e, Text))

    @property
    def message_repr(self) -> str:
        """Every element rendered as text, concatenated."""
        return "".join(e.repr_text() for e in self)

    def __repr__(self) -> str:
        return f"MessageChain({list.__repr__(self)})"


class MessageChains(list):
    """The messages one model step's output was parsed into, one `MessageChain` per `<msg>`, in order: what an
    `after_xml_parse` hook written for KiraAI receives. Removing, adding or reordering chains changes what is sent;
    a chain left empty is not sent."""

    def __repr__(self) -> str:
        return f"MessageChains({list.__repr__(self)})"


class MessageStrategy(enum.StrEnum):
    """What happens to an incoming message once every `im_message` hook has run."""

    DISCARD = "discard"
    TRIGGER = "trigger"
    BUFFER = "buffer"
    FLUSH = "flush"


class KiraEvent:
    """Base of every event a hook receives. `stop()` ends the remaining hooks and the event's further processing."""

    __slots__ = ("is_stopped", "stopped_by")

    def __init__(self) -> None:
        self.is_stopped = False
        #: `plugin_id.hook` of the hook that stopped the event (set by the hook engine), or None.
        self.stopped_by: str | None = None

    def stop(self) -> None:
        """Stop: no later hook runs for this event, and nothing later in the pipeline happens for it."""
        self.is_stopped = True


@dataclass(slots=True)
class KiraIMMessage:
    """A message as a platform adapter delivered it.

    `message_id` is the platform's id of the message (for replies and recalls). `is_notice` marks a platform
    event that is not a message someone wrote (a poke, a recall, someone joining; also a plugin's
    `publish_notice`): its chain holds `Poke` or `Notice` elements. `self_id` is the bot account that received it,
    for adapters that serve several accounts (KiraAI's field of the same name); empty when the platform has one.
    `raw` is the platform's event as received. `session` may be left out when the message is wrapped in a
    `KiraMessageEvent(..., adapter=...)`: the event derives it from the adapter, group and sender, as KiraAI does.
    `message_str` is the text the model reads for this message (None: `message_repr`).
    """

    chain: MessageChain
    sender: User | None = None
    session: Session | None = None
    group: Group | None = None
    message_id: str = ""
    is_mentioned: bool = False
    timestamp: float = field(default_factory=time.time)
    raw: Any = None
    is_notice: bool = False
    self_id: str = ""
    extra: dict[str, Any] | None = None
    message_str: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.chain, MessageChain):
            self.chain = MessageChain(self.chain)
        if self.sender is None:
            self.sender = User("unknown")
        if self.self_id is None:
            self.self_id = ""
        self.is_mentioned = bool(self.is_mentioned)

    @property
    def message_repr(self) -> str:
        """Every element rendered as text, concatenated."""
        return self.chain.message_repr

    @property
    def raw_message(self) -> Any:
        """KiraAI's name for `raw`, the platform's own form of the message."""
        return self.raw

    def is_group_message(self) -> bool:
        """True when the message was written in a group."""
        return self.group is not None


def _session_of(message: KiraIMMessage, adapter: AdapterInfo | None) -> Session:
    """The session a message belongs to: its own, else derived from the adapter, group and sender (KiraAI)."""
    if message.session is not None:
        return message.session
    if adapter is None or not adapter.name:
        raise TypeError("a KiraIMMessage without a session needs the event's adapter= to derive one from")
    if message.group is not None:
        return Session(adapter.name, "gm", str(message.group.group_id))
    sender = message.sender if message.sender is not None else User("unknown")  # as __post_init__ would set it
    return Session(adapter.name, "dm", str(sender.user_id))


class KiraMessageEvent(KiraEvent):
    """One incoming message on its way through the `im_message` hooks, which choose its strategy."""

    __slots__ = (
        "message",
        "_strategy",
        "_strategy_forced",
        "strategy_watcher",
        "_adapter",
        "message_types",
        "timestamp",
        "inbox_id",
    )

    def __init__(
        self,
        message: KiraIMMessage,
        *,
        adapter: AdapterInfo | None = None,
        message_types: list[str] | None = None,
        timestamp: float | None = None,
    ) -> None:
        """`adapter`, `message_types` (the element types the adapter can send) and `timestamp` are KiraAI's event
        fields; `adapter` defaults to the one the message's session names."""
        self.is_stopped = False
        self.stopped_by = None
        message.session = _session_of(message, adapter)
        self.message = message
        #: Its row in the durable inbox (None without history): marked done when the turn that answers it is stored.
        self.inbox_id: str | None = None
        self._strategy = MessageStrategy.DISCARD
        self._strategy_forced = False
        #: Called with the event after each change of its strategy or `strategy_forced` (None: nobody watches). A
        #: trace sets it while the `im_message` and `message_buffered` hooks run, to see which hook changed what.
        self.strategy_watcher: Callable[[KiraMessageEvent], None] | None = None
        self._adapter = adapter  # None: made from the session when first read (most events never read it)
        self.message_types = list(message_types) if message_types is not None else []
        self.timestamp = timestamp if timestamp is not None else message.timestamp

    @property
    def adapter(self) -> AdapterInfo:
        """The adapter the message came through (KiraAI's `event.adapter`)."""
        if self._adapter is None:
            self._adapter = AdapterInfo.named(self.session.adapter_name)
        return self._adapter

    @property
    def message_repr(self) -> str:
        """The message's elements rendered as text, read from the chain as it is now: a hook that replaces an
        element (an `Image` by `Text("[图片]")`) changes what later hooks and the model read."""
        return self.message.chain.message_repr

    @property
    def session(self) -> Session:
        """The conversation this message belongs to. Settable, as in KiraAI (a `Session` or an
        `adapter:dm|gm:id` string): an `im_message` hook that assigns one reroutes the message (its buffer, its
        turn, where the reply goes)."""
        session = self.message.session
        assert session is not None, "__init__ gives the message its session and the setter takes no None"
        return session

    @session.setter
    def session(self, session: Session | str) -> None:
        self.message.session = Session.from_sid(session) if isinstance(session, str) else session

    @property
    def sid(self) -> str:
        """The session id, `adapter_name:dm|gm:id`."""
        return self.session.sid

    @property
    def sender(self) -> User:
        """Who sent the message."""
        sender = self.message.sender
        assert sender is not None, "KiraIMMessage.__post_init__ puts User('unknown') in place of None"
        return sender

    @property
    def group(self) -> Group | None:
        """The group, or None in a direct chat."""
        return self.message.group

    @property
    def is_mentioned(self) -> bool:
        """True when the message mentions the bot."""
        return self.message.is_mentioned

    @property
    def is_notice(self) -> bool:
        """True for a platform notice (poke, recall, someone joined) rather than a message someone wrote."""
        return self.message.is_notice

    @property
    def chain(self) -> MessageChain:
        """The message's elements (so a batch's messages read like KiraAI's `KiraIMMessage`)."""
        return self.message.chain

    @property
    def message_id(self) -> str:
        """The platform's id of the message."""
        return self.message.message_id

    @property
    def self_id(self) -> str:
        """The bot's own account id on the platform."""
        return self.message.self_id

    @property
    def extra(self) -> dict[str, Any] | None:
        """Adapter-specific extra data of the message."""
        return self.message.extra

    @property
    def raw_message(self) -> Any:
        """The platform's own form of the message."""
        return self.message.raw

    @property
    def message_str(self) -> str:
        """The text the model reads for this message: `message_repr` unless a hook set another one."""
        text = self.message.message_str
        return self.message_repr if text is None else text

    @message_str.setter
    def message_str(self, text: str | None) -> None:
        self.message.message_str = text

    def is_group_message(self) -> bool:
        """True when the message was written in a group."""
        return self.message.group is not None

    @property
    def process_strategy(self) -> str:
        """KiraAI's name for the chosen strategy, as a string (`"buffer"`, `"trigger"`, ...)."""
        return self.strategy.value

    @property
    def strategy(self) -> MessageStrategy:
        """What becomes of the message after its `im_message` hooks: set by `trigger()`, `buffer()`, `flush()` and
        `discard()` (which leave a forced one alone), or assigned."""
        return self._strategy

    @strategy.setter
    def strategy(self, strategy: MessageStrategy) -> None:
        self._strategy = strategy
        if self.strategy_watcher is not None:
            self.strategy_watcher(self)

    @property
    def strategy_forced(self) -> bool:
        """True once a hook forced the strategy: the later ones cannot change it (but by assigning it)."""
        return self._strategy_forced

    @strategy_forced.setter
    def strategy_forced(self, forced: bool) -> None:
        self._strategy_forced = forced
        if self.strategy_watcher is not None:
            self.strategy_watcher(self)

    def _set(self, strategy: MessageStrategy, force: bool) -> None:
        if self._strategy_forced:
            return
        # The slots, not the properties: twenty plugins may each choose a strategy for every message.
        watcher = self.strategy_watcher
        if watcher is not None and (strategy is not self._strategy or force != self._strategy_forced):
            self._strategy, self._strategy_forced = strategy, force
            watcher(self)
        else:
            self._strategy, self._strategy_forced = strategy, force

    def trigger(self, force: bool = False) -> None:
        """Process this message at once, skipping the debounce."""
        self._set(MessageStrategy.TRIGGER, force)

    def buffer(self, force: bool = False) -> None:
        """Put the message in the session buffer and fire `message_buffered`."""
        self._set(MessageStrategy.BUFFER, force)

    def flush(self, force: bool = False) -> None:
        """Add the message to the buffer and process the whole buffer now."""
        self._set(MessageStrategy.FLUSH, force)

    def discard(self, force: bool = False) -> None:
        """Drop the message; the remaining `im_message` hooks still run."""
        self._set(MessageStrategy.DISCARD, force)

    def __repr__(self) -> str:
        return f"KiraMessageEvent(sid={self.sid!r}, repr={self.message_repr!r}, strategy={self.strategy.value})"


class KiraMessageBatchEvent(KiraEvent):
    """The messages of one session merged into one turn for the model."""

    __slots__ = (
        "messages",
        "session",
        "capabilities",
        "tool_attachments",
        "push",
        "role",
        "_adapter",
        "timestamp",
        "_event_id",
        "_message_types",
        "sends",
    )

    def __init__(
        self,
        messages: Sequence[KiraMessageEvent] | Sequence[KiraIMMessage] = (),
        session: Session | None = None,
        *,
        capabilities: frozenset[str] | None = None,
        push: dict[str, Any] | None = None,
        role: str | None = None,
        adapter: AdapterInfo | None = None,
        message_types: list[str] | None = None,
        timestamp: float | None = None,
    ) -> None:
        """`messages` are message events (a KiraAI-style list of `KiraIMMessage` is wrapped into events);
        `session` defaults to the last message's. `adapter`, `message_types` and `timestamp` are KiraAI's fields."""
        self.is_stopped = False
        self.stopped_by = None
        events = [m if isinstance(m, KiraMessageEvent) else KiraMessageEvent(m, adapter=adapter) for m in messages]
        if session is None:
            if not events:
                raise TypeError("a KiraMessageBatchEvent needs its session, or at least one message")
            session = events[-1].session
        self.messages = events
        self.session = session
        #: The element types the session's adapter can send (None: all); the built-in tags offered follow it.
        self.capabilities = capabilities
        #: Files this turn's tools returned (`ToolResult.attachments`): the `<file>` tag may send them.
        self.tool_attachments: list[Any] = []
        #: For a turn a plugin's `push_message(ai_behavior="respond")` caused: the push's id, plugin, source.
        self.push = push
        #: The persona this turn speaks as; role-scoped tools are offered only to it (None: global tools only).
        self.role = role
        #: How many messages the app's send path has sent for this batch so far (numbers a turn's replies).
        self.sends = 0
        self._adapter = adapter
        self._message_types = list(message_types) if message_types is not None else None
        self.timestamp = timestamp if timestamp is not None else time.time()
        self._event_id: str | None = None

    @property
    def adapter(self) -> AdapterInfo:
        """The adapter of the batch's session (KiraAI's `event.adapter`)."""
        if self._adapter is None:
            self._adapter = AdapterInfo.named(self.session.adapter_name)
        return self._adapter

    @property
    def event_id(self) -> str:
        """A unique id of this batch (KiraAI's), made when first read."""
        if self._event_id is None:
            self._event_id = uuid.uuid4().hex
        return self._event_id

    @property
    def message_types(self) -> list[str]:
        """The element types the session's adapter can send (KiraAI's name; from its capabilities)."""
        if self._message_types is not None:
            return self._message_types
        return sorted(self.capabilities) if self.capabilities is not None else list(ELEMENT_TYPES)

    @message_types.setter
    def message_types(self, value: list[str]) -> None:
        self._message_types = list(value)

    @property
    def self_id(self) -> str:
        """The bot's own account id, from the last message."""
        return self.messages[-1].self_id if self.messages else ""

    def is_group_message(self) -> bool:
        """True when the batch's session is a group."""
        return self.session.is_group

    @property
    def sid(self) -> str:
        """The session id, `adapter_name:dm|gm:id`."""
        return self.session.sid

    @property
    def message_repr(self) -> str:
        """The batch's messages rendered as text, one per line."""
        return "\n".join(m.message_repr for m in self.messages)

    @property
    def sender(self) -> User | None:
        """The sender of the last message."""
        return self.messages[-1].sender if self.messages else None

    @property
    def group(self) -> Group | None:
        """The group, or None in a direct chat."""
        return self.messages[-1].group if self.messages else None

    def __repr__(self) -> str:
        return f"KiraMessageBatchEvent(sid={self.sid!r}, messages={len(self.messages)})"


@dataclass(slots=True)
class KiraIMSentResult:
    """What happened when the bot sent one message: the adapter's message id, or the error.

    `message_ids` holds every id when the platform took the chain as several messages (QQ sends a voice or a file
    on its own), in order, `message_id` being the first; recalling the send means deleting all of them.
    """

    chain: MessageChain
    session: Session
    ok: bool = True
    message_id: str = ""
    error: str | None = None
    message_ids: tuple[str, ...] = ()


@dataclass(slots=True)
class KiraStepResult:
    """One agent step: the raw model output and the messages it sent."""

    raw_output: str = ""
    sent: list[KiraIMSentResult] = field(default_factory=list)
    step: int = 0


class KiraExceptionEvent(KiraEvent):
    """A hook (or tag handler, or pipeline stage) failed: what failed, where, and the event it was handling."""

    __slots__ = ("error", "plugin_id", "hook_name", "event_name", "origin", "traceback", "timed_out")

    def __init__(
        self,
        error: BaseException,
        plugin_id: str,
        hook_name: str,
        event_name: str,
        origin: Any = None,
        traceback: str = "",
        timed_out: bool = False,
    ) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.error = error
        self.plugin_id = plugin_id
        self.hook_name = hook_name
        self.event_name = event_name
        self.origin = origin
        self.traceback = traceback
        self.timed_out = timed_out

    def __repr__(self) -> str:
        return f"KiraExceptionEvent({self.plugin_id}.{self.hook_name} on {self.event_name}: {self.error!r})"


class KiraCustomEvent(KiraEvent):
    """An event a plugin defines and dispatches itself with `ctx.dispatch_custom(name, data)` (KiraAI:
    `ctx.emit_custom_event(event_name, payload)`; `event_name`, `payload` and `source_plugin` are its names)."""

    __slots__ = ("name", "data", "source_plugin", "timestamp")

    def __init__(
        self,
        name: str | None = None,
        data: Any = None,
        *,
        event_name: str | None = None,
        payload: Any = None,
        source_plugin: str = "",
        timestamp: float | None = None,
    ) -> None:
        self.is_stopped = False
        self.stopped_by = None
        named = name if name is not None else event_name
        if named is None or (name is not None and event_name is not None):
            raise TypeError("a custom event needs its name: KiraCustomEvent(name) or KiraCustomEvent(event_name=...)")
        self.name = named
        self.data = data if payload is None else payload
        self.source_plugin = source_plugin
        self.timestamp = timestamp if timestamp is not None else time.time()

    @property
    def event_name(self) -> str:
        """KiraAI's name for `name`."""
        return self.name

    @property
    def payload(self) -> Any:
        """KiraAI's name for `data`."""
        return self.data

    def __repr__(self) -> str:
        return f"KiraCustomEvent({self.name!r}, {self.data!r})"


class KiraLifecycleEvent(KiraEvent):
    """Passed to `loaded` and `shutdown` hooks: which plugin (or None for the whole app) is starting or stopping."""

    __slots__ = ("plugin_id",)

    def __init__(self, plugin_id: str | None = None) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.plugin_id = plugin_id
