"""The platform clients KiraAI's `adapter.get_client()` returns, over hookchat's adapters: for OneBot (QQ) the shape
of KiraAI's NapCat WebSocket client, `await client.send_action(action, params, timeout=10.0) -> dict`, on the
adapter's own connection (`OneBotAdapter.call_action`), so nothing opens a second link to the implementation.
"""

from __future__ import annotations

import asyncio
from typing import Any

from core.adapter.onebot import ActionFailed, ActionTimeout, OneBotAdapter

__all__ = ["OneBotClient"]


class OneBotClient:
    """KiraAI's `NapCatWebSocketClient` as its plugins use it: OneBot actions on the adapter's connection.

    `send_action` answers the implementation's response as a dict, as KiraAI's does: `status` ("ok" or "failed"),
    `retcode`, `data`, and for a failure `message` and `wording` (a failure is answered, not raised). No answer within
    `timeout` seconds raises `TimeoutError`; no connection raises the adapter's `NotConnected`.
    """

    def __init__(self, adapter: OneBotAdapter) -> None:
        self.adapter = adapter

    async def send_action(
        self, action: str, params: dict[str, Any] | None = None, timeout: float = 10.0
    ) -> dict[str, Any]:
        """Run the OneBot action `action` with `params` and return the response dict."""
        name = action.replace("/", "")  # as KiraAI: "/get_msg" and "get_msg" are one action
        try:
            data = await asyncio.wait_for(self.adapter.call_action(name, **dict(params or {})), timeout)
        except ActionFailed as failed:
            return {
                "status": "failed",
                "retcode": failed.retcode,
                "data": None,
                "message": failed.wording,
                "wording": failed.wording,
            }
        except (TimeoutError, ActionTimeout):
            raise TimeoutError(f"OneBot action {name} got no answer within {timeout} s") from None
        return {"status": "ok", "retcode": 0, "data": data}

    async def get_login_info(self) -> dict[str, Any]:
        """`get_login_info`: the bot account's `user_id` and `nickname` (in `data`)."""
        return await self.send_action("get_login_info", {})

    async def get_user_info(self, user_id: str | int) -> dict[str, Any]:
        """`get_stranger_info` of `user_id`."""
        return await self.send_action("get_stranger_info", {"user_id": user_id})

    async def get_group_info(self, group_id: str | int) -> dict[str, Any]:
        """`get_group_info` of `group_id`."""
        return await self.send_action("get_group_info", {"group_id": group_id})

    async def get_msg(self, message_id: str | int) -> dict[str, Any]:
        """`get_msg`: a message by its platform id."""
        return await self.send_action("get_msg", {"message_id": message_id})

    async def get_forward_msg(self, message_id: str | int) -> dict[str, Any]:
        """`get_forward_msg`: the messages of a forwarded bundle."""
        return await self.send_action("get_forward_msg", {"message_id": message_id})

    async def send_poke(self, user_id: str | int, group_id: str | int | None = None) -> dict[str, Any]:
        """`send_poke`: poke `user_id`, in `group_id` when given."""
        params: dict[str, Any] = {"user_id": user_id}
        if group_id:
            params["group_id"] = group_id
        return await self.send_action("send_poke", params)

    async def get_record(self, file_id: str, output_format: str = "mp3") -> dict[str, Any]:
        """`get_record`: a voice message converted to `output_format`."""
        return await self.send_action("get_record", {"file_id": file_id, "out_format": output_format})

    async def upload_private_file(self, user_id: str, file: str, name: str) -> dict[str, Any]:
        """`upload_private_file`: send the file at `file` (a path the implementation reads) to `user_id`."""
        return await self.send_action("upload_private_file", {"user_id": user_id, "file": file, "name": name})

    async def upload_group_file(self, group_id: str, file: str, name: str) -> dict[str, Any]:
        """`upload_group_file`: send the file at `file` (a path the implementation reads) to `group_id`."""
        return await self.send_action("upload_group_file", {"group_id": group_id, "file": file, "name": name})
