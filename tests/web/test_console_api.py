"""The web console over HTTP and its WebSocket, as a browser or a script reaches it on loopback."""

from __future__ import annotations

import json

import httpx
import pytest
from websockets.sync.client import connect

from core.testing import ChatHarness, ScriptedProvider
from core.web import WebConsole, WebConsoleError
from tests.web.conftest import LiveConsole, copy_sample


def ws_url(live: LiveConsole, query: str = "") -> str:
    return live.url.replace("http://", "ws://") + "/ws/chat" + query


def connect_chat(live: LiveConsole, query: str = ""):
    """The chat WebSocket, opened as a script does: with the console's token in a header, no Origin."""
    return connect(ws_url(live, query), additional_headers=live.auth)


def frames_until(ws, kind: str) -> list[dict]:
    frames = []
    while True:
        frame = json.loads(ws.recv(timeout=10))
        frames.append(frame)
        if frame["type"] == kind:
            return frames


def test_a_web_chat_turn_streams_each_message_with_its_trace_and_renders_elements(live_console):
    live_console.provider.add('<msg>one <at user_id="42" /></msg><msg>two</msg>')
    with connect_chat(live_console, "?session=s1") as ws:
        assert json.loads(ws.recv(timeout=10)) == {"type": "ready", "session": "s1", "sid": "web:dm:s1"}
        ws.send(json.dumps({"type": "message", "text": "hello"}))
        frames = frames_until(ws, "turn_ended")
    drafts = [f["text"] for f in frames if f["type"] == "draft"]
    assert drafts and drafts[0] and "one".startswith(drafts[0].strip()), "the text shows while it is written"
    frames = [f for f in frames if f["type"] != "draft"]
    kinds = [f["type"] for f in frames]
    assert kinds == ["turn_started", "message", "message", "turn_ended"]
    first, second, ended = frames[1], frames[2], frames[3]
    assert first["elements"][0] == {"type": "text", "text": "one "}
    assert first["elements"][1]["type"] == "at" and first["elements"][1]["user_id"] == "42"
    assert second["text"] == "two"
    assert first["trace_id"] == second["trace_id"] == ended["trace_id"] != ""
    assert ended["stopped"] is False and ended["sent"] == 2
    trace = live_console.client().get(f"/api/traces/{ended['trace_id']}").json()
    assert trace["sid"] == "web:dm:s1" and trace["outcome"] == "completed"


def test_bad_frames_are_refused_with_a_reason_and_the_socket_stays_usable(live_console):
    live_console.provider.add("<msg>fine</msg>")
    with connect_chat(live_console, "?session=s2") as ws:
        ws.recv(timeout=10)
        ws.send("not json")
        assert json.loads(ws.recv(timeout=10)) == {"type": "error", "error": "a frame must be JSON"}
        ws.send(json.dumps({"type": "message", "text": "   "}))
        assert "non-empty" in json.loads(ws.recv(timeout=10))["error"]
        ws.send(json.dumps({"type": "message", "text": "now a real one"}))
        assert [f["type"] for f in frames_until(ws, "turn_ended")][-2] == "message"
    with connect_chat(live_console, "?session=bad%20id") as ws:
        assert "session id" in json.loads(ws.recv(timeout=10))["error"]


def test_the_stop_button_stops_the_turn_in_progress(live_console):
    gate = live_console.call(_blocking_model(live_console))
    with connect_chat(live_console, "?session=s3") as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "message", "text": "take your time"}))
        assert json.loads(ws.recv(timeout=10))["type"] == "turn_started"
        live_console.call(gate["entered"].wait())
        ws.send(json.dumps({"type": "stop"}))
        live_console.call(_set(gate["release"]))
        ended = frames_until(ws, "turn_ended")
    assert [f["type"] for f in ended] == ["turn_ended"], "nothing of the stopped turn is sent"
    assert ended[-1]["stopped"] is True


async def _blocking_model(live):
    import asyncio

    entered, release = asyncio.Event(), asyncio.Event()
    provider = live.provider
    original = provider.complete

    async def complete(req):
        entered.set()
        await release.wait()
        provider.add("<msg>too late</msg>")
        return await original(req)

    provider.complete = complete  # this test's model waits until the browser pressed stop
    provider.chunk_size = None
    return {"entered": entered, "release": release}


async def _set(event):
    event.set()


def test_hooks_plugins_sessions_and_logs(live_console):
    live_console.provider.add("<msg>hi</msg>")
    with connect_chat(live_console, "?session=s4") as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "message", "text": "hello"}))
        frames_until(ws, "turn_ended")
    client = live_console.client()
    hooks = client.get("/api/hooks").json()
    events = [e["event"] for e in hooks["events"]]
    assert events.index("im_message") < events.index("message_buffered") < events.index("llm_request")
    first = hooks["events"][0]["hooks"]
    assert {"plugin_id": "chat", "function": "choose_strategy", "priority": 100, "deadline": 10.0} in first
    assert [h["priority"] for h in first] == sorted((h["priority"] for h in first), reverse=True)
    assert client.post("/api/plugins/greeter/disable").json()["state"] == "disabled"
    assert "greeter" in client.get("/api/hooks").json()["disabled"]
    assert client.post("/api/plugins/greeter/enable").json()["state"] == "loaded"
    assert client.post("/api/plugins/nobody/reload").status_code == 404

    assert {"sid": "web:dm:s4", "turns": 1} in client.get("/api/sessions").json()
    history = client.get("/api/sessions/web:dm:s4").json()
    assert [m["role"] for m in history["turns"][0]["messages"]] == ["user", "assistant"]
    assert client.delete("/api/sessions/web:dm:s4").json() == {"ok": True, "removed": 1}
    assert client.get("/api/sessions/web:dm:s4").json()["turns"] == []

    lines = client.get("/api/logs", params={"plugin": "greeter"}).json()
    assert any("greeter adds its greeting" in line["message"] for line in lines)
    assert all(line["plugin_id"] == "greeter" for line in lines)
    with client.stream("GET", "/api/logs/stream", params={"plugin": "greeter", "level": "INFO"}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data: "):
                assert json.loads(line[6:])["plugin_id"] == "greeter"
                break


def test_settings_are_checked_before_saving_and_kept_for_the_next_start(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    greeter = copy_sample("greeter", plugins)
    live = LiveConsole([greeter], ScriptedProvider(), tmp_path / "data")
    try:
        client = live.client()
        bad = client.put("/api/plugins/greeter/config", json={"values": {"times": "many"}})
        assert bad.status_code == 400 and "times" in bad.json()["error"]
        assert client.put("/api/plugins/greeter/config", content=b"{oops").status_code == 400
        assert live.app.plugins.get_plugin("greeter").cfg["times"] == 1, "a refused value changes nothing"
        good = client.put("/api/plugins/greeter/config", json={"values": {"times": 2, "greeting": "Hey"}})
        assert good.status_code == 200 and good.json()["status"]["state"] == "loaded"
        assert live.app.plugins.get_plugin("greeter").cfg["times"] == 2
    finally:
        live.close()
    again = LiveConsole([greeter], ScriptedProvider(), tmp_path / "data")
    try:
        assert again.app.plugins.plugin_config["greeter"] == {"times": 2, "greeting": "Hey"}
    finally:
        again.close()


@pytest.mark.anyio
async def test_beyond_loopback_the_console_needs_a_token_and_checks_it(tmp_path):
    async with ChatHarness(provider=ScriptedProvider()) as bot:
        with pytest.raises(WebConsoleError, match="needs a token"):
            WebConsole(bot.app, host="0.0.0.0", port=0)
        console = WebConsole(bot.app, port=0, token="s3cret")
        async with console:
            async with httpx.AsyncClient(base_url=console.url) as client:
                assert (await client.get("/api/plugins")).status_code == 401
                assert (await client.get("/api/plugins", headers={"Authorization": "Bearer nope"})).status_code == 401
                ok = await client.get("/api/plugins", headers={"Authorization": "Bearer s3cret"})
                assert ok.status_code == 200
                login = await client.get("/?token=s3cret")
                assert login.status_code == 303 and "hookchat_token=s3cret" in login.headers["set-cookie"]
                assert login.headers["location"] == "/"
            async with httpx.AsyncClient(base_url=console.url, cookies={"hookchat_token": "s3cret"}) as browser:
                assert (await browser.get("/api/hooks")).status_code == 200
            async with httpx.AsyncClient(base_url=console.url) as stranger:
                assert (await stranger.get("/page/plugin/x/y")).status_code == 401, "plugin pages are behind it too"
                with pytest.raises(httpx.HTTPStatusError):
                    async with stranger.stream("GET", "/api/logs/stream") as stream:
                        stream.raise_for_status()


def test_plugin_pages_and_endpoints_live_under_the_plugin_id_while_it_is_loaded(live_console):
    client = live_console.client()
    assert client.get("/page/plugin/greeter/hello").text == "<h1>Hello from greeter</h1>"
    page = client.get("/page/plugin/greeter/dashboard/")
    assert page.status_code == 200 and 'id="greeter-page"' in page.text
    assert client.get("/page/plugin/greeter/dashboard/app.js").status_code == 200
    assert client.get("/page/plugin/greeter/dashboard/../manifest.json").status_code == 404
    assert client.get("/api/plugin/greeter/status").json() == {"greeting": "Hello", "times": 1}
    echo = client.post("/api/plugin/greeter/echo/ab", params={"times": 2}, json={"x": 1})
    assert echo.json() == {"word": "abab", "body": {"x": 1}}
    assert client.get("/api/plugin/greeter/echo/ab").status_code == 405
    assert client.post("/api/plugin/greeter/echo/ab", params={"times": "x"}, json={}).status_code == 400
    menu = client.get("/api/overview").json()["pages"]
    assert menu == [
        {
            "plugin_id": "greeter",
            "label": "Greeter",
            "icon": "Monitor",
            "order": 100,
            "url": "/page/plugin/greeter/dashboard",
        }
    ]

    assert client.post("/api/plugins/greeter/disable").status_code == 200
    assert client.get("/page/plugin/greeter/hello").status_code == 404, "a stopped plugin's pages are gone"
    assert client.get("/api/plugin/greeter/status").status_code == 404
    assert client.get("/api/overview").json()["pages"] == []
    client.post("/api/plugins/greeter/enable")
    assert client.get("/api/plugin/greeter/status").status_code == 200


@pytest.mark.anyio
async def test_the_plugins_page_says_whether_a_reloaded_plugins_new_code_is_in_effect(tmp_path):
    from core.reload import PluginReloader

    root = tmp_path / "plugins"
    root.mkdir()
    greeter = copy_sample("greeter", root)
    async with ChatHarness(provider=ScriptedProvider(), config={"plugins": {"dirs": [str(root)]}}) as bot:
        reloader = PluginReloader(bot.app)
        async with WebConsole(bot.app, port=0, reloader=reloader) as console:
            async with httpx.AsyncClient(
                base_url=console.url, headers={"Authorization": f"Bearer {console.token}"}
            ) as http:
                (greeter / "main.py").write_text("broken(\n", encoding="utf-8")
                await reloader.apply([greeter / "main.py"])
                listed = {p["plugin_id"]: p for p in (await http.get("/api/plugins")).json()}
                assert listed["greeter"]["state"] == "loaded", "the previous version keeps running"
                assert listed["greeter"]["previous_version"] is True
                assert (
                    listed["greeter"]["reload"]["ok"] is False
                    and "SyntaxError" in listed["greeter"]["reload"]["reason"]
                )
                assert (await http.get("/api/overview")).json()["reload"] is True
