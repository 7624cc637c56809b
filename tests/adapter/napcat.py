"""The OneBot peers the adapter tests talk to: NapCat's mock server from ncatbot5 (a OneBot implementation we did
not write), started on a free loopback port, plus helpers that record what the bot sends.

Importing ncatbot configures the root logger (its console handler, log files under ./logs): the import here points
its files at one directory under the system's temporary directory and then gives the test run its own logging back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from tests.adapter.nonebot_models import assert_sent_parses

os.environ.setdefault("LOG_FILE_PATH", os.path.join(tempfile.gettempdir(), "hookchat-tests-ncatbot-logs"))
_root = logging.getLogger()
_handlers, _level = list(_root.handlers), _root.level
from ncatbot.utils.testing import NapCatMockServer, create_bot_data, get_standard_data  # noqa: E402 - after its log settings, which it reads on import

for _handler in list(_root.handlers):
    if _handler not in _handlers:
        _root.removeHandler(_handler)
        _handler.close()
_root.handlers[:] = _handlers
_root.setLevel(_level)

__all__ = ["NapCatMockServer", "MockPeer", "BOT_ID", "FRIEND_ID", "GROUP_ID", "standard_data", "implementation_headers"]

#: Ids in the mock's standard data: the bot's account, a friend, and a group both are in.
BOT_ID, FRIEND_ID, GROUP_ID = "123456789", "100001", "200001"


def standard_data(bot_id: str = BOT_ID) -> dict[str, Any]:
    """The mock's standard data set (a bot, three friends, groups), logged in as `bot_id`."""
    data = get_standard_data()
    data["bot"] = create_bot_data(bot_id, f"Bot{bot_id}")
    return data


class MockPeer:
    """A started `NapCatMockServer` on 127.0.0.1 and a free port, whose `send_msg` calls come out of `next_sent()`.

    Quirks of the mock, which the tests rely on or work around: it sends `message_id` and the sender's `user_id` as
    strings and the event's `user_id` as a number; its lifecycle event's `time` is the event loop's clock, not the
    epoch; it sends no heartbeats; `inject_event` sleeps 0.1 s after sending; it checks a token from the request
    path, which newer `websockets` no longer passes (so its token check cannot work and is not used).
    """

    def __init__(self, bot_id: str = BOT_ID) -> None:
        self.server = NapCatMockServer(host="127.0.0.1", port=0, initial_data=standard_data(bot_id))
        self._sent: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.server.set_response("send_msg", self._record_send)

    def _record_send(self, action: str, params: dict[str, Any]) -> dict[str, Any]:
        self._sent.put_nowait(params)
        return self.server.api_handler.handle_request(action, params)

    async def next_sent(self) -> dict[str, Any]:
        """The params of the next `send_msg` the mock answers (waits for it), checked against nonebot's models."""
        params = await self._sent.get()
        assert_sent_parses(params)
        return params

    async def start(self) -> None:
        """Start (or restart, on the same port) the mock."""
        await self.server.start()
        self.server.port = self.server._server.sockets[0].getsockname()[1]  # keep the port across a restart

    async def stop(self) -> None:
        """Stop the mock: it closes every connection; its records are kept for a restart."""
        await self.server.stop()

    @property
    def url(self) -> str:
        """Where the adapter connects in forward mode."""
        return f"ws://127.0.0.1:{self.server.port}"

    def calls(self, action: str) -> list[dict[str, Any]]:
        """The params of every call of `action` the mock answered, in order."""
        return self.server.get_calls_for_action(action)

    @contextlib.asynccontextmanager
    async def reverse_link(self, url: str, *, token: str | None = None) -> AsyncIterator[ClientConnection]:
        """Connect to an adapter's reverse-mode server as the implementation would, and run the mock's protocol
        logic (lifecycle event, answers, `inject_*`) on that connection until the block ends."""
        headers = implementation_headers(self.server.database.get_login_info()["user_id"], token)
        async with connect(url, additional_headers=headers, proxy=None) as ws:
            task = asyncio.get_running_loop().create_task(self.server._handle_connection(ws))
            try:
                yield ws
            finally:
                await ws.close()
                with contextlib.suppress(ConnectionClosed):  # the mock sends its lifecycle event unguarded
                    await task


def implementation_headers(self_id: str, token: str | None = None, role: str = "Universal") -> dict[str, str]:
    """The headers a OneBot implementation sends when it connects in reverse mode."""
    headers = {"X-Self-ID": self_id, "X-Client-Role": role}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return headers
