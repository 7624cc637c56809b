"""MCP servers as tool sources, against servers other people wrote (`mcp-server-time`, `mcp-server-git` from PyPI)
and servers made with the SDK's own server API: the tools reach the model through the registry and the per-request
ToolSet, calls and their failures become tool results, connections are restarted, and nothing is left running."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from core.config import HookchatConfig
from core.mcp import MAX_RESULT_CHARS, McpConfigError, McpManager, read_servers_file
from core.plugin import BasePlugin, on, register
from core.provider import ToolCall
from core.testing import ChatHarness, ScriptedProvider
from core.trace import render_trace
from core.utils.registry import OwnedRegistry
from tests.mcp.servers import Hostile, hostile_server, hostile_tools, serve_http, stdio_test_server, time_server

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # they start MCP servers: real processes


def tool_messages(provider: ScriptedProvider, request: int = 1) -> list[str]:
    return [m.content for m in provider.requests[request].messages if m.role == "tool"]


def mcp_config(*servers: dict) -> dict:
    return {"mcp": {"servers": list(servers)}}


async def wait_for(condition, timeout: float = 20.0) -> None:
    with anyio.fail_after(timeout):
        while not condition():
            await anyio.sleep(0.05)


class Results(BasePlugin):
    """Records every tool result the `tool_result` hooks see, and offers a tool called `weather`."""

    seen: list = []

    @on.tool_result()
    async def record(self, event, result, *args, **kwargs):
        Results.seen.append(result)

    @register.tool("weather", "The plugin's weather", {"type": "object", "properties": {"text": {"type": "string"}}})
    async def weather(self, event, text: str = "", *args, **kwargs):
        return f"plugin weather: {text}"


async def test_the_time_server_lists_its_tools_and_the_model_calls_one():
    Results.seen = []
    provider = ScriptedProvider([[ToolCall("get_current_time", {"timezone": "Asia/Tokyo"})], "done"])
    config = {**mcp_config(time_server()), "trace": {"enabled": True}}
    async with ChatHarness([Results], provider=provider, config=config) as bot:
        await bot.send("what time is it in Tokyo?")
        [status] = bot.app.mcp.status()
        traces = bot.app.tracer.recent(5, "turn")
    assert status["state"] == "ready" and status["server"].startswith("mcp-time")
    offered = {t.name for t in provider.requests[0].tool_set}
    assert {"get_current_time", "convert_time"} <= offered
    assert provider.requests[0].tool_set.get("get_current_time").owner == "mcp:time"
    [answer] = tool_messages(provider)
    assert json.loads(answer)["timezone"] == "Asia/Tokyo"
    assert [r.tool_name for r in Results.seen] == ["get_current_time"] and not Results.seen[0].is_error
    mcp_items = [i for t in traces for i in t.items if i["type"] == "mcp"]
    [tool_item] = [i for t in traces for i in t.items if i["type"] == "tool"]
    assert tool_item["plugin_id"] == "mcp:time" and not tool_item["is_error"]
    assert len(mcp_items) == 1 and mcp_items[0]["server"] == "time" and mcp_items[0]["tool"] == "get_current_time"
    assert mcp_items[0]["arguments"] == {"timezone": "Asia/Tokyo"} and mcp_items[0]["outcome"] == "ok"
    assert mcp_items[0]["duration_ms"] > 0
    assert "mcp time/get_current_time" in render_trace(traces[0].to_dict())


async def test_the_git_server_reads_a_temporary_repository(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=T", "-c", "user.email=t@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "a.txt").write_text("hello\n")
    subprocess.run([*git, "add", "a.txt"], check=True)
    subprocess.run([*git, "commit", "-q", "-m", "first commit"], check=True)
    server = {"name": "git", "command": sys.executable, "args": ["-m", "mcp_server_git", "--repository", str(repo)]}
    provider = ScriptedProvider([[ToolCall("git_log", {"repo_path": str(repo)})], "done"])
    async with ChatHarness(provider=provider, config=mcp_config(server)) as bot:
        await bot.send("show the log")
        names = {t["name"] for t in bot.app.mcp.status()[0]["tools"]}
    assert {"git_status", "git_log", "git_diff"} <= names
    [log] = tool_messages(provider)
    assert "first commit" in log


async def test_a_server_killed_mid_call_is_an_error_for_the_model_and_is_started_again_and_50_mb_are_cut(tmp_path):
    pid_file = tmp_path / "hold.pid"
    provider = ScriptedProvider(
        [
            [ToolCall("hold", {"seconds": 60})],
            "it broke",
            [ToolCall("echo", {"text": "hi"})],
            [ToolCall("huge", {"megabytes": 50}), ToolCall("huge", {"megabytes": 1})],
            "fine",
        ]
    )
    async with ChatHarness(provider=provider, config=mcp_config(stdio_test_server(tmp_path))) as bot:
        connection = bot.app.mcp.get("box")
        assert connection.state == "ready"

        async def kill_when_called() -> None:
            await wait_for(pid_file.exists)
            os.kill(int(pid_file.read_text()), signal.SIGKILL)

        async with anyio.create_task_group() as group:
            group.start_soon(kill_when_called)
            await bot.send("hold on")
        assert "closed the connection during the call" in tool_messages(provider)[0]
        assert bot.sent[-1].message_repr == "it broke"  # the turn went on
        await wait_for(lambda: connection.state == "ready" and connection.connects == 2)
        await bot.send("again")
        assert tool_messages(provider, 3)[-1] == "echo: hi"
        huge, big = tool_messages(provider, 4)[-2:]
        assert huge.startswith("error: ") and "over the 4194304 bytes hookchat accepts" in huge  # 50 MB refused
        assert len(big) < 101_000 and big.endswith(f"the first {MAX_RESULT_CHARS} are shown]")  # 1 MB cut
        assert bot.sent[-1].message_repr == "fine"


async def test_a_hostile_server_cannot_hijack_a_name_smuggle_a_ref_or_hang_the_bot():
    Results.seen = []
    state = Hostile(tools=hostile_tools())
    provider = ScriptedProvider(
        [
            [ToolCall("hostile_weather", {"text": "x"}), ToolCall("weather", {"text": "y"}), ToolCall("fail", {})],
            "survived",
            [ToolCall("hang", {})],
            "went on",
        ]
    )
    async with serve_http(hostile_server(state)) as url:
        server = {"name": "hostile", "url": url, "timeout": 1}
        async with ChatHarness([Results], provider=provider, config=mcp_config(server)) as bot:
            [status] = bot.app.mcp.status()
            listings = {t["remote_name"]: t for t in status["tools"]}
            # a schema with a remote $ref is refused (the same rule as every tool), and says why
            assert listings["fetch_ref"]["status"] == "refused" and "$ref" in listings["fetch_ref"]["reason"]
            assert "fetch_ref" not in bot.app.plugins.tools
            # the 1 MB description is cut
            assert len(bot.app.plugins.tools.get("chatty").description) < 9000
            # the plugin keeps `weather`; the server's is offered under its own prefix
            assert listings["weather"]["name"] == "hostile_weather"
            assert bot.app.plugins.tools.owner_of("weather") not in (None, "mcp:hostile")
            await bot.send("go")
            theirs, ours, fail = tool_messages(provider)
            assert theirs == "weather: x" and ours == "plugin weather: y"
            assert fail == "error: the disk is full"
            assert [r.is_error for r in Results.seen] == [False, False, True]
            assert bot.sent[-1].message_repr == "survived"
            await bot.send("hang")
            assert tool_messages(provider, 3)[-1] == "error: the tool hang did not answer within 1 s"
            assert bot.sent[-1].message_repr == "went on"
            await wait_for(lambda: state.cancelled == ["hang"])  # the server was told the call is cancelled


async def test_cancelling_the_turn_cancels_the_call_and_a_list_change_is_seen():
    state = Hostile(tools=hostile_tools())
    provider = ScriptedProvider([[ToolCall("grow", {})], "grown", [ToolCall("hang", {})], "never"])
    async with serve_http(hostile_server(state)) as url:
        server = {"name": "hostile", "url": url, "timeout": 60}
        async with ChatHarness(provider=provider, config=mcp_config(server)) as bot:
            await bot.send("grow")
            await wait_for(lambda: "grown" in bot.app.plugins.tools)  # notifications/tools/list_changed
            assert bot.app.plugins.tools.get("grown").owner == "mcp:hostile"

            message = bot.message("hang")
            received = await bot.app.receive(message)
            turn = received.turn or bot.app.flush(message.session)
            await state.started.wait()
            assert bot.app.cancel_turn(message.session)  # the operator's stop button
            with pytest.raises(asyncio.CancelledError):
                await turn
            assert "never" not in [c.message_repr for c in bot.sent]
            await wait_for(lambda: state.cancelled == ["hang"])


async def test_a_tool_result_with_a_picture_gives_an_attachment():
    state = Hostile(tools=hostile_tools())
    provider = ScriptedProvider([[ToolCall("picture", {})], "<msg><file>mcp_picture_2.png</file></msg>"])
    async with serve_http(hostile_server(state)) as url:
        async with ChatHarness(provider=provider, config=mcp_config({"name": "h", "url": url})) as bot:
            await bot.send("draw")
    assert "mcp_picture_2.png attached" in tool_messages(provider)[0]
    assert any(type(e).__name__ == "Image" for chain in bot.sent for e in chain)


async def test_an_unreachable_server_does_not_stop_the_app_and_says_why(tmp_path):
    server = {"name": "nothing", "command": str(tmp_path / "no-such-server"), "connect_timeout": 5}
    provider = ScriptedProvider(["hello"])
    async with ChatHarness(provider=provider, config=mcp_config(server)) as bot:
        await bot.send("hi")
        [status] = bot.app.mcp.status()
        assert status["state"] in ("retrying", "connecting") and status["last_error"]
        assert bot.sent[-1].message_repr == "hello"


def test_a_claude_desktop_or_kiraai_servers_file_is_read_as_it_is(tmp_path):
    file = tmp_path / "mcp.json"
    file.write_text(
        json.dumps(
            {
                "mcpServers": {
                    "time": {"command": "uvx", "args": ["mcp-server-time"], "env": {"TZ": "UTC"}},
                    "kira": {
                        "type": "sse",
                        "url": "http://127.0.0.1:9/sse",
                        "enabled": False,
                        "name": "Kira",
                        "description": "d",
                    },
                    "web": {
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"Authorization": "Bearer ${TOKEN}"},
                        "disabled": True,
                    },
                }
            }
        )
    )
    servers = {s.name: s for s in read_servers_file(file)}
    assert servers["time"].type == "stdio" and servers["time"].args == ["mcp-server-time"] and servers["time"].enabled
    assert servers["kira"].type == "sse" and not servers["kira"].enabled
    assert servers["web"].type == "streamable_http" and not servers["web"].enabled
    file.write_text(json.dumps({"mcpServers": {"bad name!": {"command": "x"}}}))
    with pytest.raises(McpConfigError, match=r"mcp\.json: mcpServers\.bad name!: name"):
        read_servers_file(file)
    config = HookchatConfig.model_validate(
        {"mcp": {"servers": [{"name": "time", "command": "x"}], "servers_file": str(tmp_path / "twice.json")}}
    )
    (tmp_path / "twice.json").write_text(json.dumps({"mcpServers": {"time": {"command": "y"}}}))
    with pytest.raises(McpConfigError, match="twice.json: MCP server.s. time are also in"):
        McpManager(config, OwnedRegistry("tool")).configured()


async def test_a_header_secret_comes_from_the_environment_and_a_missing_one_is_named(monkeypatch):
    state = Hostile(tools=hostile_tools())
    monkeypatch.delenv("HOOKCHAT_TEST_MISSING", raising=False)
    async with serve_http(hostile_server(state)) as url:
        server = {
            "name": "h",
            "url": url,
            "headers": {"Authorization": "Bearer ${HOOKCHAT_TEST_MISSING}"},
            "connect_timeout": 2,
        }
        async with ChatHarness(config=mcp_config(server)) as bot:
            [status] = bot.app.mcp.status()
    assert (
        "headers.Authorization" in status["last_error"] and "HOOKCHAT_TEST_MISSING is not set" in status["last_error"]
    )


KILL9_SCRIPT = """
import asyncio, sys
from core.testing import ChatHarness
async def main():
    async with ChatHarness(config={"mcp": {"servers": [%r]}}) as bot:
        await bot.app.plugins.tools.get("spawn_child").invoke(None, {})
        print("ready", flush=True)
        await asyncio.Event().wait()
asyncio.run(main())
"""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead for our purpose (its parent has not reaped it yet)
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks Linux's PR_SET_PDEATHSIG path")
def test_kill_9_of_hookchat_leaves_no_server_process_behind(tmp_path):
    script = KILL9_SCRIPT % (stdio_test_server(tmp_path),)
    bot = subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parents[2]
    )
    try:
        assert bot.stdout.readline().strip() == "ready"
        server_pid, child_pid = map(int, (tmp_path / "child.pid").read_text().split())
        assert _alive(server_pid) and _alive(child_pid)
        bot.kill()  # SIGKILL: no cleanup code of hookchat runs
        bot.wait()
        deadline = time.monotonic() + 10
        while (_alive(server_pid) or _alive(child_pid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(server_pid), "the MCP server outlived hookchat"
        assert not _alive(child_pid), "a process the MCP server started outlived hookchat"
    finally:
        bot.kill()


async def test_a_lazy_server_offers_its_cached_tools_and_connects_on_the_first_call(tmp_path):
    state = Hostile(tools=hostile_tools())
    provider = ScriptedProvider([[ToolCall("hostile_weather", {"text": "lazy"})], "ok"])
    async with serve_http(hostile_server(state)) as url:
        config = {"data": {"dir": str(tmp_path)}, **mcp_config({"name": "hostile", "url": url, "lazy": True})}
        async with ChatHarness(config=config) as bot:  # no cache yet: it connects at start to learn its tools
            assert bot.app.mcp.get("hostile").state == "ready"
        assert (tmp_path / "mcp" / "hostile.tools.json").is_file()
        async with ChatHarness([Results], provider=provider, config=config) as bot:
            connection = bot.app.mcp.get("hostile")
            assert connection.state == "idle" and connection.connects == 0
            assert "hostile_weather" in bot.app.plugins.tools  # offered from the cache, renamed as before
            await bot.send("weather, lazily")
            assert connection.state == "ready" and connection.connects == 1
    assert tool_messages(provider)[-1] == "weather: lazy"


async def test_an_sse_server_made_with_the_sdk_is_a_tool_source_too():
    from core.server import EmbeddedServer
    from tests.mcp.stdio_server import server as sdk_server  # the SDK's MCPServer, here over SSE

    http = EmbeddedServer(sdk_server.sse_app(), "127.0.0.1", 0, name="test sse server")
    await http.start()
    provider = ScriptedProvider([[ToolCall("echo", {"text": "over sse"})], "ok"])
    try:
        async with ChatHarness(provider=provider, config=mcp_config({"name": "sse", "url": f"{http.url}/sse"})) as bot:
            [status] = bot.app.mcp.status()
            await bot.send("go")
    finally:
        await http.stop()
    assert status["type"] == "sse" and status["state"] == "ready"
    assert tool_messages(provider)[-1] == "echo: over sse"


def test_hookchat_mcp_list_prints_each_server_and_its_tools(tmp_path):
    config = tmp_path / "hookchat.toml"
    config.write_text(
        f'[data]\ndir = "{tmp_path / "data"}"\n[adapters]\nconsole = false\n'
        f'[[mcp.servers]]\nname = "time"\ncommand = "{sys.executable}"\nargs = ["-m", "mcp_server_time"]\n'
        '[[mcp.servers]]\nname = "off"\ncommand = "nothing"\nenabled = false\n'
    )
    run = subprocess.run(
        [sys.executable, "-m", "core.cli", "-c", str(config), "mcp", "list", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert run.returncode == 0, run.stderr
    servers = {s["name"]: s for s in json.loads(run.stdout)}
    assert servers["time"]["state"] == "ready" and servers["off"]["state"] == "disabled"
    assert {t["name"] for t in servers["time"]["tools"]} == {"get_current_time", "convert_time"}
