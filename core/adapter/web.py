"""The web chat adapter: browsers chat with the bot over a WebSocket (the web console's chat page).

One socket belongs to one session (`web:dm:<session>`); every message the bot sends to that session goes to each
socket open on it, as soon as it is sent, so a streamed turn arrives message by message. A browser may stop the
turn in progress. See docs/web.md for the protocol.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import secrets
from typing import Any

import anyio
from starlette.websockets import WebSocket, WebSocketDisconnect

from core.adapter import Adapter
from core.chat import (
    BaseMessageElement,
    KiraIMMessage,
    KiraIMSentResult,
    MessageChain,
    MessageStrategy,
    Session,
    User,
)
from core.chat.message_elements import At, Emoji, File, Image, MediaError, Record, Reply, Sticker, Text, Video
from core.trace import current_trace_id

__all__ = ["WebChatAdapter", "element_to_json", "SESSION_ID_PATTERN", "MAX_INLINE_MEDIA_BYTES"]

_log = logging.getLogger("hookchat.adapter.web")

#: What a browser may name its session (the id part of `web:dm:<id>`).
SESSION_ID_PATTERN = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
#: Local media up to this size is sent to the browser inline, as a data URL; larger files are named only.
MAX_INLINE_MEDIA_BYTES = 5 * 1024 * 1024
#: The longest message a browser may send, in characters.
MAX_MESSAGE_CHARS = 20_000


async def element_to_json(element: BaseMessageElement) -> dict[str, Any]:
    """One message element as the chat page renders it: `type` plus its fields; local media inlined."""
    if isinstance(element, Text):
        return {"type": "text", "text": element.text}
    if isinstance(element, At):
        return {"type": "at", "user_id": element.user_id, "nickname": element.nickname}
    if isinstance(element, Reply):
        return {"type": "reply", "message_id": element.message_id}
    if isinstance(element, Emoji):
        return {"type": "emoji", "emoji_id": element.emoji_id}
    if isinstance(element, (Image, Sticker, Record, File, Video)):
        url = element.url if element.source == "url" else None
        if url is None and element.source != "none":
            try:
                data = await element.get_bytes()
                if len(data) <= MAX_INLINE_MEDIA_BYTES:
                    url = await element.get_data_url()
            except MediaError as exc:
                _log.warning("could not read %s for the web chat: %s", element.type, exc)
        return {
            "type": element.type,
            "url": url,
            "name": element.name,
            "mime": element.guess_mime(),
            "text": element.repr_text(),
        }
    return {"type": element.type, "text": element.repr_text()}


class WebChatAdapter(Adapter):
    """Browsers as a chat platform. `endpoint(websocket)` serves one socket (the console mounts it at `/ws/chat`).

    Browser to bot: `{"type": "message", "text": ...}` and `{"type": "stop"}` (cancels the session's turn).
    Bot to browser: `ready` (the session id), `turn_started`, `draft` (the text of the message being written, so
    far, when the model streams), `message` (each sent message: `elements`, `text`, `trace_id`), `turn_ended`
    (`trace_id`, `stopped`, `error`) and `error` (a refused frame, with the reason).
    """

    name = "web"
    capabilities = frozenset({"text", "image", "at", "reply", "emoji", "file", "record", "video", "sticker"})
    drafts = True  # a streaming model's text is shown as it is written (`draft` frames)

    def __init__(self, name: str | None = None, **options: Any) -> None:
        super().__init__(name, **options)
        self._sockets: dict[str, set[WebSocket]] = {}
        self._count = 0

    def session(self, session_id: str) -> Session:
        """The session of a browser session id."""
        return Session(self.name, "dm", session_id)

    async def send(self, session: Session, chain: MessageChain) -> KiraIMSentResult:
        sockets = list(self._sockets.get(session.session_id, ()))
        if not sockets:
            return KiraIMSentResult(chain, session, ok=False, error="no browser is connected to this session")
        self._count += 1
        message_id = f"web-{self._count}"
        frame = {
            "type": "message",
            "message_id": message_id,
            "text": chain.message_repr,
            "elements": [await element_to_json(e) for e in chain],
            "trace_id": current_trace_id(),
        }
        delivered = 0
        for socket in sockets:
            try:
                await socket.send_json(frame)
                delivered += 1
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._forget(session.session_id, socket)
        if not delivered:
            return KiraIMSentResult(chain, session, ok=False, error="the browser went away")
        return KiraIMSentResult(chain, session, ok=True, message_id=message_id)

    async def draft(self, session: Session, text: str) -> None:
        """The message being written, so far: a `draft` frame to each socket of the session."""
        for socket in list(self._sockets.get(session.session_id, ())):
            try:
                await socket.send_json({"type": "draft", "text": text})
            except (WebSocketDisconnect, RuntimeError, OSError):
                self._forget(session.session_id, socket)

    def _forget(self, session_id: str, socket: WebSocket) -> None:
        sockets = self._sockets.get(session_id)
        if sockets is not None:
            sockets.discard(socket)
            if not sockets:
                del self._sockets[session_id]

    async def endpoint(self, websocket: WebSocket) -> None:
        """Serve one browser: `?session=<id>` picks the session (a new one when absent), `?user=` the name shown."""
        session_id = websocket.query_params.get("session") or secrets.token_hex(6)
        user_name = (websocket.query_params.get("user") or "you")[:64]
        await websocket.accept()
        if not SESSION_ID_PATTERN.match(session_id):
            await websocket.send_json({"type": "error", "error": "a session id is 1-64 of A-Z a-z 0-9 _ . -"})
            await websocket.close(code=1008)
            return
        if self.app is None:
            await websocket.send_json({"type": "error", "error": "the bot is not running"})
            await websocket.close(code=1011)
            return
        self._sockets.setdefault(session_id, set()).add(websocket)
        await websocket.send_json({"type": "ready", "session": session_id, "sid": self.session(session_id).sid})
        running: list[int] = []  # the turn this socket started, while it runs
        try:
            async with anyio.create_task_group() as group:
                while True:
                    try:
                        raw = await websocket.receive_text()
                    except (WebSocketDisconnect, RuntimeError):
                        break
                    frame = _parse(raw)
                    if isinstance(frame, str):
                        await websocket.send_json({"type": "error", "error": frame})
                    elif frame["type"] == "stop":
                        self.app.cancel_turn(self.session(session_id))
                    elif running:
                        await websocket.send_json({"type": "error", "error": "wait for the reply, or stop it first"})
                    else:
                        group.start_soon(self._turn, websocket, session_id, user_name, frame["text"], running)
                group.cancel_scope.cancel()  # the browser left: its turn in progress is cancelled
        finally:
            self._forget(session_id, websocket)

    async def _turn(self, websocket: WebSocket, session_id: str, user_name: str, text: str, running: list[int]) -> None:
        assert self.app is not None
        self._count += 1
        turn = self._count
        running.append(turn)
        message = KiraIMMessage(
            MessageChain([Text(text)]),
            User(user_name, user_name),
            self.session(session_id),
            message_id=f"web-in-{turn}",
            is_mentioned=True,
        )
        ended: dict[str, Any] = {
            "type": "turn_ended",
            "turn": turn,
            "trace_id": "",
            "stopped": False,
            "error": None,
            "sent": 0,
        }
        try:
            await websocket.send_json({"type": "turn_started", "turn": turn})
            received = await self.app.receive(message)
            future = received.turn
            if future is None and received.strategy is MessageStrategy.BUFFER and message.session is not None:
                future = self.app.flush(message.session)  # like Enter in a terminal: no debounce wait
            if future is None:
                ended["error"] = "no reply: a plugin stopped or discarded the message"
            else:
                await asyncio.wait([future])  # the stop button cancels the turn's future, not this task
                if future.cancelled():
                    ended.update(stopped=True, error="stopped")
                elif future.exception() is not None:
                    # The exception's text is for the operator (the log has it): it may carry URLs and server text.
                    ended["error"] = "the turn failed (the bot's log says why)"
                else:
                    result = future.result()
                    ended.update(
                        stopped=result.stopped, error=result.error, sent=len(result.sent), trace_id=result.trace_id
                    )
            await websocket.send_json(ended)
        except (WebSocketDisconnect, RuntimeError, OSError):
            pass  # the browser left; what the turn did is in history and its trace
        finally:
            running.remove(turn)


def _parse(raw: str) -> dict[str, Any] | str:
    """A browser frame, or the reason it is refused."""
    try:
        frame = json.loads(raw)
    except ValueError:
        return "a frame must be JSON"
    if not isinstance(frame, dict) or frame.get("type") not in ("message", "stop"):
        return 'a frame is {"type": "message", "text": ...} or {"type": "stop"}'
    if frame["type"] == "message":
        text = frame.get("text")
        if not isinstance(text, str) or not text.strip():
            return "a message needs a non-empty text"
        if len(text) > MAX_MESSAGE_CHARS:
            return f"a message may hold at most {MAX_MESSAGE_CHARS} characters"
    return frame
