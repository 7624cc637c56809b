"""Every listener bound beyond loopback refuses to start without a token, with a message naming the config key that
gives it one: the OneBot reverse WebSocket, the tool registry and the web console (another host on the network is
the attacker). On loopback the OneBot reverse listener still starts without one (implementations are configured
to match), and the registry starts but refuses every request except its health check."""

from __future__ import annotations

import socket

import httpx
import pytest
from websockets.asyncio.client import connect

from core.adapter import AdapterError
from core.adapter.onebot import OneBotAdapter
from core.config import ServerConfig
from core.server import ToolRegistryServer
from core.testing import ChatHarness, ScriptedProvider
from core.utils.net import InsecureListenerError
from core.utils.registry import OwnedRegistry
from core.web import WebConsole, WebConsoleError
from tests.adapter.conftest import running_bot
from tests.adapter.napcat import BOT_ID, implementation_headers

pytestmark = pytest.mark.anyio


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_onebot_reverse_beyond_loopback_without_a_token_refuses_to_start() -> None:
    port = free_port()
    adapter = OneBotAdapter("qq", mode="reverse", host="0.0.0.0", port=port)
    with pytest.raises(AdapterError, match=r"options\.token_env") as refused:
        async with running_bot(adapter, ScriptedProvider()):
            pass
    assert "'qq'" in str(refused.value) and "0.0.0.0" in str(refused.value)
    with socket.socket() as probe:  # nothing listens: no window in which a forged bot account could connect
        assert probe.connect_ex(("127.0.0.1", port)) != 0


async def test_onebot_reverse_beyond_loopback_with_a_token_starts_and_checks_it() -> None:
    adapter = OneBotAdapter("qq", mode="reverse", host="0.0.0.0", port=0, token="s3cret")
    async with running_bot(adapter, ScriptedProvider()):
        url = f"ws://127.0.0.1:{adapter.port}/onebot/v11/ws"
        async with connect(url, additional_headers=implementation_headers(BOT_ID, "s3cret"), proxy=None):
            assert await adapter.wait_connected() == BOT_ID


async def test_onebot_reverse_on_loopback_without_a_token_still_starts() -> None:
    adapter = OneBotAdapter("qq", mode="reverse", port=0)
    async with running_bot(adapter, ScriptedProvider()):
        assert adapter.port > 0


async def test_the_tool_registry_beyond_loopback_without_a_token_refuses_to_start(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("HOOKCHAT_SERVER_TOKEN", raising=False)
    server = ToolRegistryServer(ServerConfig(host="0.0.0.0", port=0), OwnedRegistry("tool"), tmp_path)
    with pytest.raises(InsecureListenerError, match=r"HOOKCHAT_SERVER_TOKEN \(named by \[server\] token_env\)"):
        await server.start()
    assert not server.running


async def test_the_tool_registry_on_loopback_without_a_token_serves_nothing_but_its_health(
    tmp_path, monkeypatch
) -> None:
    monkeypatch.delenv("HOOKCHAT_SERVER_TOKEN", raising=False)
    server = ToolRegistryServer(ServerConfig(host="127.0.0.1", port=0), OwnedRegistry("tool"), tmp_path)
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.url) as http:
            assert (await http.get("/api/health")).status_code == 200
            assert (await http.get("/api/tools")).status_code == 403
            register = await http.post("/api/tools/register", json={"name": "x"})
            assert register.status_code == 403 and "token_env" in register.json()["error"]
    finally:
        await server.stop()


async def test_the_web_console_beyond_loopback_needs_a_token_chosen_by_the_operator(monkeypatch) -> None:
    monkeypatch.delenv("HOOKCHAT_WEB_TOKEN", raising=False)
    async with ChatHarness(provider=ScriptedProvider()) as bot:
        with pytest.raises(WebConsoleError, match=r"HOOKCHAT_WEB_TOKEN, named by \[web\] token_env"):
            WebConsole(bot.app, host="0.0.0.0", port=0)
        assert not (bot.app.data_dir / "web" / "token").exists(), "no token is made up for a public address"
