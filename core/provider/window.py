"""Fitting a request into the model's context window: the oldest history goes first, then the user's message is cut.

Sizes are estimated in characters per token; every answer (and every overflow the model reports) lowers the
estimate to what the model actually counted, so a text that tokenizes badly is fitted tighter the next time.
"""

from __future__ import annotations

import json

from core.prompt_manager import UserPrompt
from core.provider.llm import ChatMessage, ContextOverflowError, LLMProvider, LLMRequest, LLMResponse, OpenAIMessage
from core.utils.log import logger

__all__ = ["ContextWindow"]

#: Characters per token first assumed: on the safe side for English (about 4); each model call's own count lowers
#: it for text that tokenizes worse (markup, digits, other scripts).
_CHARS_PER_TOKEN = 3.0
_MIN_CHARS_PER_TOKEN = 1.0
#: Appended to a user message that was cut to fit.
_CUT_MARK = "\n[...the rest of this message was cut: it was too long for the model]"


class ContextWindow:
    """Fits requests to `provider.context_tokens` (read at each fit: the provider may learn it late) and learns
    the model's characters per token from its answers. Without a known window requests go as they are."""

    def __init__(self, provider: LLMProvider) -> None:
        self.provider = provider
        #: Characters per token assumed when fitting; only ever lowered, by what the model counts.
        self.chars_per_token = _CHARS_PER_TOKEN

    def fit(self, req: LLMRequest, history_len: int, *, cut_user: bool) -> int | None:
        """Make `req` fit with room for the reply: drop the oldest of its first `history_len` messages (whole
        turns: the kept part starts at a user message), then, with `cut_user`, cut the user's message. Returns how
        many characters of the message were kept when it was cut, else None."""
        window = self.provider.context_tokens
        if not window:
            return None
        budget = window - (req.max_tokens or self.provider.max_tokens or window // 4)
        ratio = self.chars_per_token
        text = str(req.user_prompt)
        fixed = (len(req.render_system()) + len(text) + _tools_chars(req)) / ratio + 16
        sizes = [_message_chars(m) / ratio + 8 for m in req.messages]
        dropped, total = 0, fixed + sum(sizes)
        while total > budget and dropped < history_len:
            total -= sizes[dropped]
            dropped += 1
            while dropped < history_len and req.messages[dropped].role != "user":
                total -= sizes[dropped]
                dropped += 1
        if dropped:
            logger.info(
                "history of this session cut by %d message(s) to fit the model's %d-token window", dropped, window
            )
            del req.messages[:dropped]
        if total <= budget or not cut_user or not text:
            return None
        room = budget - (total - len(text) / ratio)
        kept = max(0, int(room * ratio) - len(_CUT_MARK))
        if kept >= len(text):
            return None
        req.user_prompt = UserPrompt(text[:kept] + _CUT_MARK)
        return kept

    def learn(self, req: LLMRequest, resp: LLMResponse) -> None:
        """Lower `chars_per_token` to what the model counted for `req` (never raise it: the next text may tokenize
        worse)."""
        if resp.usage.prompt_tokens > 0:
            self._lower(_request_chars(req) / resp.usage.prompt_tokens * 0.95)

    def learn_overflow(self, req: LLMRequest, exc: ContextOverflowError) -> bool:
        """After `req` overflowed the window: lower `chars_per_token` to the model's count; False when the model
        did not count (fitting again would change nothing)."""
        if not exc.prompt_tokens:
            return False
        self._lower(_request_chars(req) / exc.prompt_tokens * 0.9)
        logger.info(
            "request did not fit the model's window; fitting again at %.2f characters a token", self.chars_per_token
        )
        return True

    def _lower(self, observed: float) -> None:
        self.chars_per_token = max(_MIN_CHARS_PER_TOKEN, min(self.chars_per_token, observed))


def _message_chars(message: ChatMessage | OpenAIMessage) -> int:
    if isinstance(message, OpenAIMessage):  # a plugin's own: content may be None or parts, tool calls are dicts
        return len(json.dumps(message.to_openai(), default=str))
    return len(message.content) + sum(len(c.name) + len(c.raw_arguments or "") for c in message.tool_calls)


def _tools_chars(req: LLMRequest) -> int:
    return len(json.dumps([t.to_openai() for t in req.tool_set])) if req.tool_set else 0


def _request_chars(req: LLMRequest) -> int:
    return (
        len(req.render_system())
        + len(str(req.user_prompt))
        + _tools_chars(req)
        + sum(_message_chars(m) for m in req.messages)
    )
