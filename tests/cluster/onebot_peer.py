"""A OneBot v11 implementation of our own for the cluster tests: it connects to a gateway's reverse-mode adapter as
NapCat would, sends private messages, answers the bot's actions at once and records what the bot sent."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections import defaultdict
from typing import Any

from websockets.asyncio.client import ClientConnection, connect

BOT_ID = "10000"


class Implementation:
    """`async with Implementation(url, token) as peer:` connects; `await peer.send(user, text)` delivers a private
    message from `user`; `peer.sent[user]` lists the texts the bot sent to that user, in order."""

    def __init__(self, url: str, token: str) -> None:
        self.url = url
        self.token = token
        self.sent: dict[int, list[str]] = defaultdict(list)
        self._ids = itertools.count(1)
        self._ws: ClientConnection | None = None
        self._reader: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Implementation:
        headers = {"X-Self-ID": BOT_ID, "X-Client-Role": "Universal", "Authorization": f"Bearer {self.token}"}
        self._ws = await connect(self.url, additional_headers=headers, proxy=None)
        self._reader = asyncio.get_running_loop().create_task(self._read())
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        assert self._ws is not None and self._reader is not None
        await self._ws.close()
        self._reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reader

    async def send(self, user: int, text: str, message_id: int) -> None:
        """A private message from `user` (its platform id `message_id`)."""
        assert self._ws is not None
        await self._ws.send(
            json.dumps(
                {
                    "post_type": "message",
                    "message_type": "private",
                    "sub_type": "friend",
                    "message_id": message_id,
                    "user_id": user,
                    "message": [{"type": "text", "data": {"text": text}}],
                    "raw_message": text,
                    "font": 0,
                    "sender": {"user_id": user, "nickname": f"user{user}"},
                    "time": 1_700_000_000,
                    "self_id": int(BOT_ID),
                }
            )
        )

    async def _read(self) -> None:
        assert self._ws is not None
        async for raw in self._ws:
            frame = json.loads(raw)
            action, params = frame.get("action"), frame.get("params") or {}
            data: dict[str, Any] = {}
            if action == "send_msg":
                text = "".join(s["data"].get("text", "") for s in params["message"] if s["type"] == "text")
                self.sent[int(params["user_id"])].append(text)
                data = {"message_id": next(self._ids)}
            elif action == "get_login_info":
                data = {"user_id": int(BOT_ID), "nickname": "bot"}
            await self._ws.send(json.dumps({"status": "ok", "retcode": 0, "data": data, "echo": frame.get("echo")}))
