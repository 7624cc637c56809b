"""Nothing leaks: the plugin logger never evaluates attribute or index access in a `{}` template (user text
cannot read process globals into a log), and chat users never see the provider's error body, URL or key."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import threading
from urllib.parse import quote

import pytest

from core.provider import ProviderError
from core.provider.openai_provider import OpenAIProvider
from core.testing import ChatHarness, ScriptedProvider
from core.utils.log import get_plugin_logger

pytestmark = pytest.mark.anyio

SECRET_GLOBAL = "do-not-log-me"


class Vault:
    """An argument whose items are secret and whose repr is not."""

    def __getitem__(self, key: str) -> str:
        return SECRET_GLOBAL

    def __repr__(self) -> str:
        return "<Vault>"


def test_the_plugin_logger_never_reads_attributes_from_a_template(caplog) -> None:
    log = get_plugin_logger("notes")
    user_text = "{0.__init__.__globals__[SECRET_GLOBAL]}"

    with caplog.at_level(logging.INFO, logger="hookchat"):
        log.info(user_text, log)  # a plugin that (wrongly) used user text as the template
        log.info("{0[key]} and {}", Vault())
        log.info("user said: {}", user_text)

    messages = [r.getMessage() for r in caplog.records]
    assert not any(SECRET_GLOBAL in m for m in messages)
    assert messages[0].startswith(user_text)
    assert messages[2] == f"user said: {user_text}"


def test_plain_brace_templates_still_format() -> None:
    log = get_plugin_logger("notes")
    record = []
    handler = logging.Handler()
    handler.emit = record.append  # type: ignore[method-assign] - capture records, nothing else
    log.logger.addHandler(handler)
    try:
        log.warning("Processing request: {} ({!r}, {:>4})", "r1", "x", 7)
    finally:
        log.logger.removeHandler(handler)
    assert record[0].getMessage() == "Processing request: r1 ('x',    7)"


async def test_a_model_error_shown_to_the_user_carries_no_server_text_or_url() -> None:
    error = ProviderError(
        "openai: no model at http://10.0.0.7:8000/v1 could answer: 'm': HTTP 500: internal detail sk-live-123"
    )
    async with ChatHarness(provider=ScriptedProvider([error])) as bot:
        [chain] = await bot.send("hello")

    text = chain.plain_text
    assert "could not get an answer" in text
    assert "10.0.0.7" not in text and "http" not in text and "HTTP 500" not in text and "sk-live" not in text


async def test_the_api_key_is_redacted_in_every_form_a_server_may_echo(caplog) -> None:
    key = "sk-test/key+with=odd&chars"
    every_byte = "".join(f"%{b:02X}" for b in key.encode())  # a fully percent-encoded key, as some proxies log it
    echoed = (
        f"raw {key} url {quote(key, safe='')} b64 {base64.b64encode(key.encode()).decode()} "
        f"all {every_byte} lower {every_byte.lower()}"
    )
    body = json.dumps({"error": {"message": echoed}}).encode()

    class Echoes(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(400)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echoes)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        provider = OpenAIProvider(f"http://127.0.0.1:{server.server_address[1]}/v1", ["m"], api_key=key, max_retries=0)
        async with ChatHarness(provider=provider) as bot:
            [chain] = await bot.send("hello")
    finally:
        server.shutdown()
        server.server_close()

    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "could answer" in logged  # the detail is logged...
    for form in (
        key,
        quote(key, safe=""),
        base64.b64encode(key.encode()).decode().rstrip("="),
        every_byte,
        every_byte.lower(),
        every_byte[:12],
    ):
        assert form not in logged and form not in chain.plain_text  # ...without the key in any form
    assert "127.0.0.1" not in chain.plain_text
