"""What goes to the model and what comes back: `LLMRequest`, `LLMResponse`, `ToolCall`, `ToolResult`, and the
`LLMProvider` interface every model backend implements."""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, Callable, Iterable
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING, Any, Literal, Self, cast

from pydantic import BaseModel, ConfigDict, Field

from core.chat import BaseMessageElement, KiraStepResult
from core.config import ProviderConfig
from core.prompt_manager import Prompt, UserPrompt, default_system_prompt, render_system_prompt
from core.utils.tool_utils import ToolCall, ToolSet

__all__ = [
    "ChatMessage",
    "OpenAIMessage",
    "ToolCall",
    "ToolResult",
    "TokenUsage",
    "LLMRequest",
    "LLMResponse",
    "StreamEvent",
    "LLMProvider",
    "ProviderError",
    "ContextOverflowError",
]


class ProviderError(RuntimeError):
    """The model could not answer (network, HTTP status, timeout, malformed reply). Never stored as the bot's words.

    The message is for logs (it may carry the server's text and URLs); `public` is the short reason a chat user
    may see, which never does.
    """

    def __init__(self, message: str = "", *, public: str = "the model service failed") -> None:
        super().__init__(message)
        self.public = public


class ContextOverflowError(ProviderError):
    """The request did not fit the model's context window; `prompt_tokens` is what it counted (None: unknown). The
    agent loop fits the request tighter and tries once more."""

    def __init__(self, message: str, prompt_tokens: int | None = None) -> None:
        super().__init__(message)
        self.prompt_tokens = prompt_tokens


@dataclass(slots=True)
class ToolResult:
    """What a tool returned: text for the model, attachments the model may send with `<file>`, and whether it failed.

    The agent loop fills `tool_name`, `arguments` and `call_id` for the call it answers.
    """

    text: str = ""
    attachments: list[BaseMessageElement] = field(default_factory=list)
    is_error: bool = False
    tool_name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    call_id: str = ""


@dataclass(slots=True)
class ChatMessage:
    """One message of the conversation history, in the roles of the OpenAI chat format."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""  # a list of OpenAI content parts only in requests a plugin builds itself (not in history)
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` item."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.name is not None and self.role != "tool":
            out["name"] = self.name
        return out

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready form for storage (see `from_dict`)."""
        out = self.to_openai()
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments, "raw_arguments": c.raw_arguments}
                for c in self.tool_calls
            ]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChatMessage:
        """Rebuild a message stored with `to_dict`."""
        return cls(
            role=data["role"],
            content=data.get("content") or "",
            tool_calls=[ToolCall(**c) for c in data.get("tool_calls") or []],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
        )


class OpenAIMessage(BaseModel):
    """A chat message in OpenAI's shape, as KiraAI plugins build them (`core.agent.message.OpenAIMessage`).

    `content` may be text or a list of content parts (text and `image_url` parts); `tool_calls` are OpenAI
    `tool_calls` items as dicts. Put it in `LLMRequest(messages=[...])` for a request of the plugin's own; a plain
    dict with the same keys works too. Items can be read and written by key as well (`msg["content"]`).
    """

    # Its validator is built on first use: hookchat's own turns never make one (KiraAI-style plugins do).
    model_config = ConfigDict(defer_build=True)

    role: Literal["system", "user", "assistant", "tool"]
    content: str | list[Any] | dict[str, Any] | None = None
    reasoning_content: str | None = ""
    # A lambda, not `list`: pydantic reads the factory's signature, and a builtin's is parsed from text by `tokenize`,
    # whose first use compiles its large regular expressions (milliseconds of every command's start-up).
    tool_calls: list[dict[str, Any]] | None = Field(default_factory=lambda: [])
    tool_call_id: str | None = None
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The message as a dict, leaving out the fields that are empty (KiraAI's `to_dict`)."""
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        for key in ("reasoning_content", "tool_calls", "tool_call_id", "name"):
            if getattr(self, key):
                out[key] = getattr(self, key)
        return out

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI chat `messages` item (the reasoning text is not sent back)."""
        out = self.to_dict()
        out.pop("reasoning_content", None)
        if out["content"] is None and not out.get("tool_calls"):
            out["content"] = ""
        return out

    def __getitem__(self, key: str) -> Any:
        if key not in type(self).model_fields:
            raise KeyError(key)
        return getattr(self, key)

    def __setitem__(self, key: str, value: Any) -> None:
        if key not in type(self).model_fields:
            raise KeyError(key)
        setattr(self, key, value)


def _as_message(item: ChatMessage | OpenAIMessage | dict[str, Any]) -> ChatMessage | OpenAIMessage:
    if isinstance(item, ChatMessage | OpenAIMessage):
        return item
    if isinstance(item, dict):
        return OpenAIMessage(**item)
    raise TypeError(f"request messages are ChatMessage, OpenAIMessage or dict, not {type(item).__name__}")


@dataclass(slots=True)
class TokenUsage:
    """Token counts the provider reported (zero when it reports none)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens."""
        return self.prompt_tokens + self.completion_tokens


def _new_tool_set() -> ToolSet:
    return ToolSet()


def _set_user_prompt(req: LLMRequest, value: UserPrompt | str | Iterable[Prompt | str] | _UserPromptField) -> None:
    if isinstance(value, _UserPromptField):  # the field's default: an empty user prompt
        value = UserPrompt()
    elif not isinstance(value, UserPrompt):
        value = UserPrompt(value)
    req._user_prompt = value


class _UserPromptField(property):
    """`LLMRequest.user_prompt`: a `UserPrompt` whatever is assigned (a `str` becomes one part). A property of one
    field, not a `__setattr__` of the request, which would run for every field a request is built with; read in C.

    It is also the field's default (a dataclass takes a descriptor's class attribute as the default), which stands
    for an empty user prompt: each request gets a new one."""

    def __init__(self) -> None:
        super().__init__(attrgetter("_user_prompt"), _set_user_prompt)

    def __repr__(self) -> str:
        return "UserPrompt()"  # as the default shows in `help(LLMRequest)`


@dataclass
class LLMRequest:
    """One request to the model. `llm_request` hooks edit it in place before it is sent.

    `messages` is the history before this turn plus the turn's earlier steps (`OpenAIMessage` objects or dicts
    are accepted too, for a plugin's own requests); `user_prompt` is the new user input, a `UserPrompt`: one
    `Prompt` per message of the batch, which also reads as the text it renders to, and accepts a `str` (one part);
    `system_prompt` is a list of named sections (`role`, `persona`, `format`, `tools`, `memory`, `time` ...)
    joined in order.
    """

    messages: list[ChatMessage | OpenAIMessage] = field(default_factory=list)
    system_prompt: list[Prompt] = field(default_factory=default_system_prompt)
    if TYPE_CHECKING:
        user_prompt: UserPrompt = field(default_factory=UserPrompt)
        _user_prompt: UserPrompt = field(init=False, repr=False, compare=False)  # where the property keeps it
    else:
        user_prompt: UserPrompt = _UserPromptField()
    tool_set: ToolSet = field(default_factory=_new_tool_set)
    tool_choice: str = "auto"
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.messages = [_as_message(m) for m in self.messages]

    def get_prompt(self, name: str) -> Prompt | None:
        """The first system prompt section called `name`, or None."""
        for p in self.system_prompt:
            if p.name == name:
                return p
        return None

    def render_system(self) -> str:
        """The system message text: the non-empty sections joined in order."""
        return render_system_prompt(self.system_prompt)

    def to_openai_messages(self) -> list[dict[str, Any]]:
        """The whole conversation in OpenAI chat format: system, history, then the user prompt if any."""
        out: list[dict[str, Any]] = []
        system = self.render_system()
        if system:
            out.append({"role": "system", "content": system})
        out.extend(m.to_openai() for m in self.messages)
        if self.user_prompt:
            out.append({"role": "user", "content": self.user_prompt.text})
        return out


@dataclass
class LLMResponse:
    """What the model answered in one step, plus what the agent loop did with it.

    `text_response` is the model's raw output text (tags included); `tool_results` and `step` (the messages the
    step sent) are filled by the agent loop before `step_result` hooks see the response.
    """

    text_response: str = ""
    reasoning_content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_results: list[ToolResult] = field(default_factory=list)
    usage: TokenUsage = field(default_factory=TokenUsage)
    time_cost: float = 0.0
    model: str = ""
    finish_reason: str = ""
    step: KiraStepResult | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.text_response, str):  # e.g. a `UserPrompt` echoed back: keep the text
            self.text_response = str(self.text_response)

    @property
    def raw_output(self) -> str:
        """The model's output text as it arrived."""
        return self.text_response

    @property
    def input_tokens(self) -> int:
        """KiraAI's name for `usage.prompt_tokens`."""
        return self.usage.prompt_tokens

    @property
    def output_tokens(self) -> int:
        """KiraAI's name for `usage.completion_tokens`."""
        return self.usage.completion_tokens

    @property
    def time_consumed(self) -> float:
        """KiraAI's name for `time_cost` (seconds)."""
        return self.time_cost


@dataclass(slots=True)
class StreamEvent:
    """One item of a streamed answer: a text delta, and on the last item the complete `response`."""

    text: str = ""
    reasoning: str = ""
    response: LLMResponse | None = None


class LLMProvider(abc.ABC):
    """A model backend: a request in, a response out, and a streaming form.

    Implementations raise `ProviderError` for anything that keeps them from answering; the agent loop shows that
    to the user as an error and never stores it as the assistant's words.
    """

    name: str = "provider"
    #: The reply budget in tokens when a request sets none (None: the backend's own default).
    max_tokens: int | None = None

    @classmethod
    def from_config(cls, config: ProviderConfig) -> Self:
        """The provider a `[[providers]]` entry of this type describes (see `core.provider.registry`). The default
        passes the entry's `options` table as keyword arguments, and its `name`; hookchat's own providers read
        their named keys instead."""
        build = cast("Callable[..., Self]", cls)  # the base class declares no constructor: each provider has its own
        return build(name=config.name, **config.options)

    @abc.abstractmethod
    async def complete(self, req: LLMRequest) -> LLMResponse:
        """Answer the request in one piece."""

    async def stream(self, req: LLMRequest) -> AsyncGenerator[StreamEvent, None]:
        """Answer as a stream of text deltas; the last event carries the complete response.

        The default streams the whole answer of `complete` as one delta.
        """
        resp = await self.complete(req)
        yield StreamEvent(text=resp.text_response, reasoning=resp.reasoning_content, response=resp)

    @property
    def supports_streaming(self) -> bool:
        """True when `stream` really streams (the default implementation does not)."""
        return type(self).stream is not LLMProvider.stream

    @property
    def context_tokens(self) -> int | None:
        """The model's context window in tokens (prompt and reply together); None when the provider does not know it.

        What a history budget is derived from: the window minus the system prompt, the tool schemas and the reply.
        """
        return None

    async def aclose(self) -> None:  # noqa: B027 - optional: a provider holding nothing inherits the no-op
        """Release pooled connections or loaded models."""
