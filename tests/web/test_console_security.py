"""The console's gate against each attack of docs/security.md, as a script would try it (the same attacks from a real
browser are in test_browser_attacks.py): no token, a token file other users could read, another local user, a
page of another origin (its `Origin` header), DNS rebinding (a `Host` the operator did not name), and what a
failing model's error shows the browser."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
from pathlib import Path

import httpx
import pytest
from websockets.exceptions import InvalidStatus
from websockets.sync.client import connect

from core.provider import ProviderError
from core.testing import ChatHarness, ScriptedProvider
from core.web import WebConsole
from tests.web.conftest import LiveConsole, copy_sample
from tests.web.test_console_api import frames_until, ws_url


def test_without_the_token_nothing_is_served_and_a_browser_is_told_where_to_find_it(live_console):
    plain = httpx.Client(base_url=live_console.url)
    for path in ("/api/sessions", "/api/traces", "/api/logs", "/api/plugins", "/page/plugin/greeter/hello"):
        assert plain.get(path).status_code == 401, path
    assert plain.post("/api/plugins/greeter/disable").status_code == 401
    assert plain.get("/api/plugins", headers={"Authorization": "Bearer not-it"}).status_code == 401
    page = plain.get("/", headers={"Accept": "text/html"})
    assert page.status_code == 401 and "needs its token" in page.text and "web/token" in page.text
    assert live_console.console.token not in page.text
    with pytest.raises(InvalidStatus):
        with connect(ws_url(live_console, "?session=x")):
            pass
    assert live_console.app.plugins.status("greeter").state == "loaded"


def test_the_printed_address_logs_a_browser_in_once_and_drops_the_token_from_the_address(live_console):
    browser = httpx.Client()
    login = browser.get(live_console.login_url)
    assert "frame-ancestors 'self'" in login.headers["content-security-policy"], "no other origin frames it"
    assert login.status_code == 303 and login.headers["location"] == "/"
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie
    assert browser.get(live_console.url + "/api/plugins").status_code == 200, "the cookie carries it from now on"


def test_the_token_is_generated_once_kept_private_and_reused(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    greeter = copy_sample("greeter", plugins)
    data = tmp_path / "data"
    first = LiveConsole([greeter], ScriptedProvider(), data)
    try:
        token = first.console.token
    finally:
        first.close()
    path = data / "web" / "token"
    assert path.read_text().strip() == token and len(token) >= 32
    assert stat.S_IMODE(path.stat().st_mode) == 0o600, "readable by the operator only"
    again = LiveConsole([greeter], ScriptedProvider(), data)
    try:
        assert again.console.token == token, "the same token after a restart (open tabs stay logged in)"
    finally:
        again.close()
    path.chmod(0o644)  # someone loosened it: another user may have read it
    third = LiveConsole([greeter], ScriptedProvider(), data)
    try:
        assert third.console.token != token and stat.S_IMODE(path.stat().st_mode) == 0o600
    finally:
        third.close()


SYSTEM_PYTHON = Path("/usr/bin/python3")  # one the other user may run (a venv or pyenv under /root is not)


@pytest.mark.skipif(os.geteuid() != 0 or not SYSTEM_PYTHON.exists(), reason="needs root to act as another user")
def test_another_local_user_can_neither_read_the_token_nor_use_the_console(tmp_path):
    data = Path(tempfile.mkdtemp(prefix="hookchat-shared-"))  # under /tmp, open to every user like a home could be
    try:
        data.chmod(0o755)
        plugins = tmp_path / "plugins"
        plugins.mkdir()
        live = LiveConsole([copy_sample("greeter", plugins)], ScriptedProvider(), data)
        try:
            (data / "web").chmod(0o755)
            (data / "web" / "readable.txt").write_text("anyone")  # shows the other user reads what it may
            script = (
                "import sys, urllib.request, urllib.error\n"
                "web = sys.argv[1]\n"
                "print(open(web + '/readable.txt').read())\n"
                "try:\n    open(web + '/token').read(); print('TOKEN READ')\n"
                "except PermissionError:\n    print('token: permission denied')\n"
                "try:\n    urllib.request.urlopen(sys.argv[2] + '/api/sessions'); print('SESSIONS READ')\n"
                "except urllib.error.HTTPError as e:\n    print('sessions:', e.code)\n"
            )
            other = subprocess.run(
                [str(SYSTEM_PYTHON), "-c", script, str(data / "web"), live.url],
                user="nobody",
                capture_output=True,
                text=True,
                timeout=30,
                cwd="/",
            )
        finally:
            live.close()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    assert other.stdout.splitlines() == ["anyone", "token: permission denied", "sessions: 401"], other.stderr


def test_dns_rebinding_a_host_the_operator_did_not_name_is_refused_even_with_the_token(live_console):
    client = live_console.client()
    port = live_console.console.port
    for host in (
        f"rebind.attacker.example:{port}",
        f"localhost.attacker.example:{port}",
        "",
        f"127.0.0.1.nip.io:{port}",
    ):
        r = client.get("/api/sessions", headers={"Host": host})
        assert r.status_code == 403 and "allowed_hosts" in r.text, host
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"LOCALHOST:{port}"):
        assert client.get("/api/sessions", headers={"Host": host}).status_code == 200, host
    # The socket goes to 127.0.0.1, the request names the attacker's host: what a rebound name looks like.
    with pytest.raises(InvalidStatus) as refused:
        with connect(
            f"ws://rebind.attacker.example:{port}/ws/chat",
            additional_headers=live_console.auth,
            sock=socket.create_connection(("127.0.0.1", port)),
        ):
            pass
    assert refused.value.response.status_code == 403


def test_a_name_the_operator_configures_is_allowed(tmp_path):
    async def main() -> list[int]:
        config = {"data": {"dir": str(tmp_path / "data")}, "web": {"allowed_hosts": ["bot.lan"]}}
        async with ChatHarness(provider=ScriptedProvider(), config=config) as bot:
            async with WebConsole(bot.app, port=0) as console:
                auth = {"Authorization": f"Bearer {console.token}"}
                async with httpx.AsyncClient(base_url=console.url, headers=auth) as http:
                    return [
                        (await http.get("/api/plugins", headers={"Host": h})).status_code
                        for h in (f"bot.lan:{console.port}", f"localhost:{console.port}", f"127.0.0.1:{console.port}")
                    ]

    assert asyncio.run(main()) == [200, 403, 200], "the configured list replaces the default names"


def test_another_origin_cannot_change_anything_or_open_the_chat_even_with_the_cookie(live_console):
    # Cookies ignore ports: a page on another port of 127.0.0.1 is the same *site*, so the browser sends the
    # SameSite=Strict cookie with its requests. Only the Origin check stops it.
    token = live_console.console.token
    port = live_console.console.port
    same = f"http://127.0.0.1:{port}"
    for origin in ("http://127.0.0.1:9999", "http://evil.example", "null", f"https://127.0.0.1.evil.example:{port}"):
        stranger = httpx.Client(
            base_url=live_console.url, cookies={"hookchat_token": token}, headers={"Origin": origin}
        )
        assert stranger.post("/api/plugins/greeter/disable").status_code == 403, origin
        assert stranger.post("/api/plugins/greeter/reload").status_code == 403, origin
        assert stranger.delete("/api/sessions/web:dm:s1").status_code == 403, origin
        assert stranger.get("/api/sessions").status_code == 403, origin
        with pytest.raises(InvalidStatus):
            with connect(
                ws_url(live_console, "?session=evil"),
                additional_headers={"Cookie": f"hookchat_token={token}", "Origin": origin},
            ):
                pass
    assert live_console.app.plugins.status("greeter").state == "loaded"
    friend = httpx.Client(base_url=live_console.url, cookies={"hookchat_token": token}, headers={"Origin": same})
    assert friend.post("/api/plugins/greeter/reload").json()["state"] == "loaded", "the console's own page works"
    live_console.provider.add("<msg>hi</msg>")
    with connect(
        ws_url(live_console, "?session=mine"), additional_headers={"Cookie": f"hookchat_token={token}", "Origin": same}
    ) as ws:
        assert json.loads(ws.recv(timeout=10))["type"] == "ready"


def test_a_failing_model_shows_the_browser_no_url_no_body_and_no_key(tmp_path):
    plugins = tmp_path / "plugins"
    plugins.mkdir()
    error = ProviderError(
        "openai: no model at http://10.0.0.7:8000/v1 could answer: 'm': HTTP 500: "
        '{"error": "upstream sk-live-123 failed"}',
        public="the model service is unavailable",
    )
    live = LiveConsole([copy_sample("greeter", plugins)], ScriptedProvider([error]), tmp_path / "data")
    try:
        with connect(ws_url(live, "?session=err"), additional_headers=live.auth) as ws:
            ws.recv(timeout=10)
            ws.send(json.dumps({"type": "message", "text": "hello"}))
            frames = frames_until(ws, "turn_ended")
        trace = live.client().get(f"/api/traces/{frames[-1]['trace_id']}").json()
    finally:
        live.close()
    shown = json.dumps(frames)
    assert frames[-1]["error"] == "the model service is unavailable"
    for secret in ("10.0.0.7", "HTTP 500", "sk-live-123", "upstream"):
        assert secret not in shown, secret
    assert "10.0.0.7" in json.dumps(trace), "the operator still has the detail, in the trace (behind the token)"


def test_a_nul_byte_in_a_plugin_page_path_is_a_404_not_a_500(live_console):
    client = live_console.client()
    for path in (
        "/page/plugin/greeter/dashboard/%00",
        "/page/plugin/greeter/dashboard/a%00.html",
        "/page/plugin/gre%00eter/hello",
    ):
        r = client.get(path)
        assert r.status_code == 404, (path, r.status_code)
    assert client.get("/page/plugin/greeter/dashboard/").status_code == 200, "the page itself still works"
