"""Messages and the events hooks receive: `MessageChain`, `KiraIMMessage`, `KiraMessageEvent` with its strategy
methods, `KiraMessageBatchEvent`, and the result and notification events of the pipeline."""

from __future__ import annotations

import enum
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from core.chat.message_elements import (
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
from core.chat.session import Group, Session, User

__all__ = [
    "MessageChain",
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
    def plain_text(self) -> str:
        """The concatenated text of the `Text` elements only."""
        return "".join(e.text for e in self if isinstance(e, Text))

    @property
    def message_repr(self) -> str:
        """Every element rendered as text, concatenated."""
        return "".join(e.repr_text() for e in self)

    def __repr__(self) -> str:
        return f"MessageChain({list.__repr__(self)})"


class MessageStrategy(str, enum.Enum):
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
    event that is not a message someone wrote (a poke, a recall, someone joining): its chain holds `Poke` or
    `Notice` elements. `self_id` is the bot account that received it, for adapters that serve several accounts
    (KiraAI's field of the same name); empty when the platform has one. `raw` is the platform's event as received.
    """

    chain: MessageChain
    sender: User
    session: Session
    group: Group | None = None
    message_id: str = ""
    is_mentioned: bool = False
    timestamp: float = field(default_factory=time.time)
    raw: Any = None
    is_notice: bool = False
    self_id: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.chain, MessageChain):
            self.chain = MessageChain(self.chain)

    @property
    def message_repr(self) -> str:
        """Every element rendered as text, concatenated."""
        return self.chain.message_repr


class KiraMessageEvent(KiraEvent):
    """One incoming message on its way through the `im_message` hooks, which choose its strategy."""

    __slots__ = ("message", "message_repr", "strategy", "strategy_forced")

    def __init__(self, message: KiraIMMessage) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.message = message
        self.message_repr = message.chain.message_repr
        self.strategy = MessageStrategy.DISCARD
        self.strategy_forced = False

    @property
    def session(self) -> Session:
        """The conversation this message belongs to."""
        return self.message.session

    @property
    def sid(self) -> str:
        """The session id, `adapter_name:dm|gm:id`."""
        return self.message.session.sid

    @property
    def sender(self) -> User:
        """Who sent the message."""
        return self.message.sender

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

    def _set(self, strategy: MessageStrategy, force: bool) -> None:
        if self.strategy_forced:
            return
        self.strategy = strategy
        self.strategy_forced = force

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

    __slots__ = ("messages", "session", "capabilities", "tool_attachments", "push", "role")

    def __init__(
        self,
        messages: list[KiraMessageEvent],
        session: Session,
        *,
        capabilities: frozenset[str] | None = None,
        push: dict[str, Any] | None = None,
        role: str | None = None,
    ) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.messages = messages
        self.session = session
        #: The element types the session's adapter can send (None: all); the built-in tags offered follow it.
        self.capabilities = capabilities
        #: Files this turn's tools returned (`ToolResult.attachments`): the `<file>` tag may send them.
        self.tool_attachments: list[Any] = []
        #: For a turn a plugin's `push_message(ai_behavior="respond")` caused: the push's id, plugin, source.
        self.push = push
        #: The persona this turn speaks as; role-scoped tools are offered only to it (None: global tools only).
        self.role = role

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
    """What happened when the bot sent one message: the adapter's message id, or the error."""

    chain: MessageChain
    session: Session
    ok: bool = True
    message_id: str = ""
    error: str | None = None


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
    """An event a plugin defines and dispatches itself with `ctx.dispatch_custom(name, data)`."""

    __slots__ = ("name", "data")

    def __init__(self, name: str, data: Any = None) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.name = name
        self.data = data

    def __repr__(self) -> str:
        return f"KiraCustomEvent({self.name!r}, {self.data!r})"


class KiraLifecycleEvent(KiraEvent):
    """Passed to `loaded` and `shutdown` hooks: which plugin (or None for the whole app) is starting or stopping."""

    __slots__ = ("plugin_id",)

    def __init__(self, plugin_id: str | None = None) -> None:
        self.is_stopped = False
        self.stopped_by = None
        self.plugin_id = plugin_id
