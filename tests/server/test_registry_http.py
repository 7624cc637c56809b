"""The tool registry's HTTP API and its call-backs, in one process: tokens, loopback callbacks, body limits, the
register/unregister/clear/list routes, and every way a callback can fail reaching the model as a tool error."""

import asyncio
import json

import httpx
import pytest
from starlette.responses import PlainTextResponse, Response

from core.provider import ToolCall
from core.testing import ScriptedProvider
from tests.server.registry_helpers import auth, callback_server, registration, registry_bot

pytestmark = pytest.mark.anyio


def tool_messages(provider: ScriptedProvider, request: int = 1) -> list[str]:
    return [m.content for m in provider.requests[request].messages if m.role == "tool"]


async def test_a_registered_tool_is_called_back_and_its_answer_reaches_the_model(tmp_path):
    seen = []

    def answer(body):
        seen.append(body)
        return {"output": {"echo": body["arguments"]["text"]}, "is_error": False}

    call = ToolCall("echo_remote", {"text": "hi"}, id="call-7")
    provider = ScriptedProvider([[call], "done"])
    async with callback_server(answer) as cb, registry_bot(provider, tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/api/tools/register", json=registration("echo_remote", f"{cb.url}/cb"), headers=auth())
            assert r.status_code == 200, r.text
            assert r.json()["tool"]["available"] is True
        tool = bot.app.plugins.tools.get("echo_remote")
        assert tool.remote and bot.app.plugins.tools.owner_of("echo_remote") == "remote:tests"
        await bot.send("echo hi")
    assert seen == [
        {
            "name": "echo_remote",
            "arguments": {"text": "hi"},
            "call_id": "call-7",
            "raw_arguments": json.dumps({"text": "hi"}),
        }
    ]
    assert tool_messages(provider) == ['{"echo": "hi"}']


async def test_registration_needs_the_token(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = registration("x", "http://127.0.0.1:9/cb")
            missing = await http.post("/api/tools/register", json=body)
            wrong = await http.post("/api/tools/register", json=body, headers=auth("not-the-token"))
            listing = await http.get("/api/tools")
    assert missing.status_code == wrong.status_code == listing.status_code == 401
    assert "bearer token" in missing.json()["error"]
    assert "x" not in bot.app.plugins.tools


async def test_with_no_token_configured_registration_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("HOOKCHAT_SERVER_TOKEN", raising=False)
    async with registry_bot(ScriptedProvider(), tmp_path, token=None) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post(
                "/api/tools/register", json=registration("x", "http://127.0.0.1:9/cb"), headers=auth("anything")
            )
            health = await http.get("/api/health")
    assert r.status_code == 403 and "no token is configured" in r.json()["error"]
    assert health.status_code == 200 and health.json()["boot_id"]


async def test_the_token_may_come_from_the_variable_named_by_token_env(tmp_path, monkeypatch):
    monkeypatch.setenv("HOOKCHAT_SERVER_TOKEN", "from-env")
    async with registry_bot(ScriptedProvider(), tmp_path, token=None) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.get("/api/tools", headers=auth("from-env"))
    assert r.status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        "http://10.0.0.5:8000/cb",
        "http://example.com/cb",
        "http://127.0.0.1.nip.io/cb",
        "http://169.254.169.254/latest/meta-data",
        "http://user:pw@127.0.0.1/cb",
        "http://[::ffff:127.0.0.1]/cb",
        "file:///etc/passwd",
        "http://2130706433/cb",
        "http://xn--localhost/cb",  # an IDNA name that does not even decode
    ],
)
async def test_callbacks_off_the_loopback_interface_are_refused(tmp_path, url):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            r = await http.post("/api/tools/register", json=registration("evil", url), headers=auth())
    assert r.status_code == 400 and "callback_url" in r.json()["error"]
    assert "evil" not in bot.app.plugins.tools


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("name", "has space", "is invalid: use 1 to 64 characters"),
        ("name", "x" * 65, "is invalid"),
        ("timeout_seconds", 301, "at most 300"),
        ("timeout_seconds", 0, "above 0"),
        ("parameters", {"type": "string"}, "JSON Schema object"),
        ("source", "bad source!", "source"),
        ("role", "", "role"),
    ],
)
async def test_registrations_breaking_the_tool_rules_are_refused_with_the_rule(tmp_path, field, value, message):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url) as http:
            body = {**registration("ok_name", "http://127.0.0.1:9/cb"), field: value}
            r = await http.post("/api/tools/register", json=body, headers=auth())
    assert r.status_code == 400
    assert message in r.json()["error"]
    assert len([t for t in bot.app.plugins.tools.active() if getattr(t, "remote", False)]) == 0


async def test_an_oversize_body_is_refused_while_it_is_read(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path, max_body_bytes=2048) as (bot, server):
        body = registration("big", "http://127.0.0.1:9/cb", description="x" * 4096)
        async with httpx.AsyncClient(base_url=server.url) as http:
            declared = await http.post("/api/tools/register", json=body, headers=auth())

            async def chunks():  # no Content-Length: the limit must hold while streaming
                data = json.dumps(body).encode()
                for i in range(0, len(data), 512):
                    yield data[i : i + 512]

            streamed = await http.post(
                "/api/tools/register", content=chunks(), headers={**auth(), "Content-Type": "application/json"}
            )
    assert declared.status_code == streamed.status_code == 413
    assert "big" not in bot.app.plugins.tools


async def test_a_deeply_nested_body_is_refused_as_invalid_json(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url, headers=auth()) as http:
            r = await http.post(
                "/api/tools/register",
                content=b"[" * 100_000 + b"]" * 100_000,
                headers={"Content-Type": "application/json"},
            )
    assert r.status_code == 400 and "not valid JSON (or is nested too deeply)" in r.json()["error"]


async def test_a_tool_unreachable_for_forget_after_seconds_is_forgotten(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        registry = server.registry
        await registry.register(registration("dead", "http://127.0.0.1:9/cb"))
        registry._hide(registry.get("tests", "dead"), "as after a refused call")
        assert await registry.recheck() == 0 and registry.get("tests", "dead") is not None, "kept while recent"
        registry.forget_after = 0
        assert await registry.recheck() == 0
        assert registry.list("tests") == []
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        assert server.registry.list("tests") == [], "deleted from the store too"


async def test_stop_propagates_the_callers_cancellation_and_still_stops(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        stopping = asyncio.create_task(server.stop())
        await asyncio.sleep(0)  # stop() now waits for its re-check task
        stopping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stopping
        assert not server.running and not server.registry.is_open


async def test_unregister_clear_and_list(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url, headers=auth()) as http:
            for name, source, role in [("a", "s1", None), ("b", "s1", "alice"), ("c", "s2", None)]:
                r = await http.post(
                    "/api/tools/register", json=registration(name, "http://127.0.0.1:9/cb", source=source, role=role)
                )
                assert r.status_code == 200, r.text
            listed = (await http.get("/api/tools", params={"source": "s1"})).json()
            assert sorted(t["name"] for t in listed["tools"]) == ["a", "b"]
            assert (await http.post("/api/tools/unregister", json={"name": "c", "source": "s1"})).json()["removed"] == 0
            assert (await http.post("/api/tools/unregister", json={"name": "c"})).json()["removed"] == 1
            assert (await http.post("/api/tools/clear", json={"source": "s1", "role": "alice"})).json()["removed"] == 1
            assert sorted(t.name for t in bot.app.plugins.tools.active()) == ["a"]
            assert (await http.post("/api/tools/clear", json={"source": "s1", "role": None})).json()["removed"] == 1
            assert (await http.post("/api/tools/clear", json={})).status_code == 400
            assert (await http.post("/api/tools/unregister", content=b"[1, 2]")).status_code == 400
            assert (await http.post("/api/tools/unregister", content=b"{not json")).status_code == 400
    assert len(bot.app.plugins.tools) == 0


@pytest.mark.parametrize(
    "reply, expected",
    [
        (PlainTextResponse("not json"), "something other than a JSON object"),
        ({"result": 1}, "something other than a JSON object"),
        (Response(status_code=500), "answered HTTP 500"),
        ({"output": "bad city", "is_error": True, "error": "no such city"}, "error: no such city\nbad city"),
    ],
)
async def test_malformed_and_failed_callbacks_become_tool_errors(tmp_path, reply, expected):
    provider = ScriptedProvider([[ToolCall("flaky", {"text": "x"})], "ok"])
    async with callback_server(lambda body: reply) as cb, registry_bot(provider, tmp_path) as (bot, server):
        await server.registry.register(registration("flaky", f"{cb.url}/cb"))
        await bot.send("go")
    [message] = tool_messages(provider)
    assert message.startswith("error: ") and expected in message


async def test_a_refused_connection_is_an_error_and_hides_the_tool_until_it_answers_again(tmp_path):
    provider = ScriptedProvider([[ToolCall("gone", {"text": "x"})], "ok"])
    async with callback_server(lambda body: {"output": "back", "is_error": False}) as cb:
        url = f"{cb.url}/cb"
    # the callback server is stopped now: its port refuses connections
    async with registry_bot(provider, tmp_path) as (bot, server):
        await server.registry.register(registration("gone", url))
        await bot.send("go")
        assert "unreachable" in tool_messages(provider)[0]
        assert "gone" not in bot.app.plugins.tools
        assert server.registry.get("tests", "gone").available is False


async def test_a_slow_callback_times_out_as_a_tool_error(tmp_path):
    release = asyncio.Event()

    async def slow_app(scope, receive, send):  # answers only when released
        await release.wait()

    from core.server import EmbeddedServer

    slow = EmbeddedServer(slow_app, "127.0.0.1", 0)
    await slow.start()
    provider = ScriptedProvider([[ToolCall("slow", {"text": "x"})], "ok"])
    try:
        async with registry_bot(provider, tmp_path) as (bot, server):
            await server.registry.register(registration("slow", f"{slow.url}/cb", timeout_seconds=0.2))
            await bot.send("go")
    finally:
        release.set()
        await slow.stop()
    assert "did not answer within 0.2 s" in tool_messages(provider)[0]


async def test_list_shows_local_plugin_tools_beside_remote_ones(tmp_path):
    from core.plugin import BasePlugin, register

    class Local(BasePlugin):
        @register.tool("local_tool", "A local tool", {"type": "object", "properties": {}})
        async def local_tool(self, event, *_):
            return "ok"

    async with registry_bot(ScriptedProvider(), tmp_path, plugins=[Local]) as (bot, server):
        async with httpx.AsyncClient(base_url=server.url, headers=auth()) as http:
            tools = (await http.get("/api/tools")).json()["tools"]
    assert {"name": "local_tool", "source": "plugin:local", "remote": False}.items() <= tools[0].items()


async def test_the_registry_serves_on_the_configured_port_and_refuses_a_taken_one(tmp_path):
    async with registry_bot(ScriptedProvider(), tmp_path) as (bot, server):
        port = server.port
        assert server.url == f"http://127.0.0.1:{port}"
        from core.server import ToolRegistryServer

        second = ToolRegistryServer(
            bot.app.config.server,
            bot.app.plugins.tools,
            bot.app.data_dir,
            port=port,
            db_path=tmp_path / "other.sqlite3",
        )
        with pytest.raises(OSError):
            await second.start()
        assert server.running
