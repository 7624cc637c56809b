"""What goes to the model and what comes back: `LLMRequest`, `LLMResponse`, `ToolCall`, `ToolResult`, and the
`LLMProvider` interface every model backend implements."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

from core.chat import BaseMessageElement, KiraStepResult
from core.prompt_manager import Prompt, default_system_prompt, render_system_prompt
from core.utils.tool_utils import ToolCall, ToolSet

__all__ = [
    "ChatMessage",
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
    """The model could not answer (network, HTTP status, timeout, malformed reply). Never stored as the bot's words."""


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
    content: str = ""
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


@dataclass
class LLMRequest:
    """One request to the model. `llm_request` hooks edit it in place before it is sent.

    `messages` is the history before this turn plus the turn's earlier steps; `user_prompt` is the new user input
    (the batch's messages); `system_prompt` is a list of named sections (`role`, `persona`, `format`, `tools`,
    `memory`, `time` ...) joined in order.
    """

    messages: list[ChatMessage] = field(default_factory=list)
    system_prompt: list[Prompt] = field(default_factory=default_system_prompt)
    user_prompt: str = ""
    tool_set: ToolSet = field(default_factory=_new_tool_set)
    tool_choice: str = "auto"
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    metadata: dict[str, Any] = field(default_factory=dict)

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
            out.append({"role": "user", "content": self.user_prompt})
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

    @property
    def raw_output(self) -> str:
        """The model's output text as it arrived."""
        return self.text_response


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

    @abc.abstractmethod
    async def complete(self, req: LLMRequest) -> LLMResponse:
        """Answer the request in one piece."""

    async def stream(self, req: LLMRequest) -> AsyncIterator[StreamEvent]:
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

    async def aclose(self) -> None:
        """Release pooled connections or loaded models."""
