"""The attacks of docs/security.md from a real browser: the operator is logged in to the console (its cookie is
set), then opens a page of another origin, served from a second port, that tries to open the chat socket, disable
and reload a plugin (fetch and a classic form post) and read sessions and traces. Cookies ignore ports, so the
browser does send the console's SameSite=Strict cookie with these: the console's Origin check must refuse them.
Then a DNS-rebinding request (a name of the attacker's resolving to 127.0.0.1) and a `#page/javascript:` link."""

from __future__ import annotations

import http.server
import json
import logging
import threading
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from tests.web.browser import chromium_available, start_browser
from tests.web.conftest import ARTIFACTS
from tests.web.test_console_api import connect_chat, frames_until

pytestmark = pytest.mark.skipif(not chromium_available(), reason="needs Debian's chromium and chromium-driver")

REBOUND = "rebind.test"  # the browser resolves it to 127.0.0.1, as a rebinding attacker's DNS would

ATTACK_PAGE = """<!doctype html><html><head><title>cute cats</title></head><body>
<h1>Nothing to see here</h1><pre id="results"></pre>
<iframe name="sink" style="display:none"></iframe>
<iframe id="framed" src="CONSOLE/#plugins" width="600" height="300"></iframe>
<form id="csrf" method="post" action="CONSOLE/api/plugins/greeter/reload" target="sink"></form>
<script>
const target = "CONSOLE";
const results = {};
const attempt = async (name, fn) => {
  try { results[name] = await fn(); } catch (e) { results[name] = "blocked: " + e.name; }
};
(async () => {
  await attempt("chat socket", () => new Promise((resolve) => {
    const ws = new WebSocket(target.replace("http", "ws") + "/ws/chat?session=evil");
    ws.onopen = () => { ws.send(JSON.stringify({type: "message", text: "tell me everything"})); resolve("opened"); };
    ws.onclose = () => resolve("refused");
    setTimeout(() => resolve("no answer"), 5000);
  }));
  await attempt("disable by fetch", async () => {
    await fetch(target + "/api/plugins/greeter/disable", {method: "POST", mode: "no-cors", credentials: "include"});
    return "sent";
  });
  await attempt("reload by form", () => new Promise((resolve) => {
    document.querySelector("iframe").onload = () => resolve("sent");
    document.getElementById("csrf").submit();
    setTimeout(() => resolve("no answer"), 5000);
  }));
  for (const path of ["/api/sessions", "/api/traces", "/api/sessions/web:dm:secret"]) {
    await attempt("read " + path, async () => {
      const r = await fetch(target + path, {credentials: "include"});
      return "read " + r.status + ": " + await r.text();
    });
  }
  document.getElementById("results").textContent = JSON.stringify(results);
  document.body.dataset.done = "1";
})();
</script></body></html>"""


@pytest.fixture
def browser(tmp_path):
    driver = start_browser(tmp_path / "profile", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1")
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def attacker(live_console) -> Iterator[str]:
    """Another origin: the attack page, served from a second port of 127.0.0.1."""
    page = ATTACK_PAGE.replace("CONSOLE", live_console.url).encode()

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(page)))
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def shot(driver, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(ARTIFACTS / f"web-{name}.png"))


def wait_for(driver, condition, timeout: float = 20):
    return WebDriverWait(driver, timeout).until(condition)


def test_a_page_of_another_origin_gets_nothing_from_a_logged_in_console(live_console, attacker, browser, caplog):
    live_console.provider.add("<msg>the secret plan</msg>")
    with connect_chat(live_console, "?session=secret") as ws:
        ws.recv(timeout=10)
        ws.send(json.dumps({"type": "message", "text": "remember the secret plan"}))
        frames_until(ws, "turn_ended")
    greeter = live_console.app.plugins.get_plugin("greeter")

    # The operator opens the console: first without the token (the page says where to find it), then logs in.
    browser.get(live_console.url + "/")
    field = wait_for(browser, EC.presence_of_element_located((By.ID, "token")))
    assert "needs its token" in browser.find_element(By.TAG_NAME, "h1").text
    shot(browser, "login")
    field.send_keys(live_console.console.token + "\n")
    wait_for(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "#chat-log[data-ready]")))
    assert "token" not in browser.current_url

    with caplog.at_level(logging.WARNING, "hookchat.web"):
        browser.get(attacker)
        wait_for(browser, EC.presence_of_element_located((By.CSS_SELECTOR, "body[data-done]")))
        results = json.loads(browser.find_element(By.ID, "results").text)
    shot(browser, "attack-page")
    browser.switch_to.frame(browser.find_element(By.ID, "framed"))  # the console, framed to lure clicks onto it
    assert not browser.find_elements(By.ID, "plugins-table") and not browser.find_elements(By.ID, "chat-log"), (
        "another origin cannot frame the console (clickjacking)"
    )
    browser.switch_to.default_content()

    assert results["chat socket"] == "refused"
    for path in ("/api/sessions", "/api/traces", "/api/sessions/web:dm:secret"):
        assert results[f"read {path}"].startswith("blocked"), (path, results[f"read {path}"])
    assert "secret plan" not in json.dumps(results)
    assert live_console.app.plugins.status("greeter").state == "loaded", "not disabled"
    assert live_console.app.plugins.get_plugin("greeter") is greeter, "not reloaded"
    assert "web:dm:evil" not in live_console.call(live_console.app.history.sessions()), "no chat happened"
    refused = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    # The browser sent them (with the cookie); the console refused each one by its Origin.
    assert any("websocket /ws/chat" in m for m in refused)
    assert any("http /api/plugins/greeter/disable" in m for m in refused)
    assert any("http /api/plugins/greeter/reload" in m for m in refused)
    assert all("cross-origin" in m for m in refused)


def test_dns_rebinding_and_a_javascript_page_link_get_nothing(live_console, browser):
    port = live_console.console.port
    # The attacker's name now resolves to 127.0.0.1: the page is "same-origin" with the console, but the Host
    # header names the attacker's host. Even the token in the address does not help.
    for url in (
        f"http://{REBOUND}:{port}/api/sessions",
        f"http://{REBOUND}:{port}/?token={live_console.console.token}",
    ):
        browser.get(url)
        body = browser.find_element(By.TAG_NAME, "body").text
        assert "is not one of [web] allowed_hosts" in body and "web:dm" not in body, url
    shot(browser, "rebinding")

    browser.get(live_console.login_url)
    for link in (
        "javascript:parent.document.title='pwned'",
        "//evil.example/",
        "data:text/html,<b>x</b>",
        "/\\evil.example/",
    ):
        browser.get(f"{live_console.url}/#page/{quote(link, safe='')}")
        wait_for(browser, EC.text_to_be_present_in_element((By.ID, "status"), "a page link must be a path"))
        frame = browser.find_element(By.ID, "page-frame")
        assert browser.title != "pwned" and not frame.get_attribute("src"), link
    browser.get(f"{live_console.url}/#page/{quote('/page/plugin/greeter/hello', safe='')}")
    wait_for(
        browser,
        lambda d: (d.find_element(By.ID, "page-frame").get_attribute("src") or "").endswith(
            "/page/plugin/greeter/hello"
        ),
    )
