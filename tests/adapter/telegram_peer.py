"""telegram-test-api (npm, 4.2.x), a Bot API server someone else wrote, run for the Telegram tests; with the small
shim in front of it that makes it answer as Telegram does where it does not.

`.ci/run` installs the package into `.peers/` (git-ignored); without node or the package, the tests that need it
skip, saying why. The server runs once per test session, on a free loopback port. The shim, an HTTP proxy in a
thread of the test process, does six things telegram-test-api does not, and nothing else:

1. `getMe`: adds `"is_bot": true` (the server leaves it out; aiogram's `User` requires it).
2. `date` (and `edit_date`) in milliseconds become seconds, as the Bot API sends them; the `botToken` the server
   puts in every message it hands out (no Bot API field) is left out, so a message has the Bot API's fields only.
3. `getUpdates` waits up to its `timeout` for an update (the server answers at once, empty or not): long polling.
4. `setWebhook`: the server posts updates to the webhook without the secret token; the shim registers itself as the
   webhook and forwards each update to the real one with `X-Telegram-Bot-Api-Secret-Token`, as Telegram does.
5. Only a bot's latest `getUpdates` waits: an older one still waiting (its bot restarted) is answered 409, as
   Telegram answers it, instead of taking an update the server then counts as delivered and never sends again.
6. `rate_limit(method, retry_after)`: the next call of `method` is answered 429 with `retry_after`, as Telegram
   answers a bot that sends too fast (the server has no rate limits), and not passed on.

The client side (`/sendMessage`: a user writes; `/getUpdates`: what the bot sent to a chat) is the server's own.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import httpx
from aiohttp import ClientSession, web

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / ".peers" / "node_modules" / "telegram-test-api"
BOT_TOKEN = "123456:TEST-token-for-telegram-test-api"
BOT_ID = 666  # what telegram-test-api's getMe says
BOT_USERNAME = "TestNameBot"
SECRET_HEADER = "X-Telegram-Bot-Api-Secret-Token"
_CONFLICT = {
    "ok": False,
    "error_code": 409,
    "description": "Conflict: terminated by other getUpdates request; make sure that only one bot instance is running",
}

_SERVER = """
const TelegramServer = require('telegram-test-api').TelegramServer || require('telegram-test-api');
const server = new TelegramServer({port: Number(process.argv[1]), host: '127.0.0.1', storeTimeout: 600});
server.start().then(() => console.log('ready'));
process.on('unhandledRejection', (e) => console.error('unhandled: ' + e));
process.stdin.on('end', () => process.exit(0));  // the test process is gone: so is the server
process.stdin.resume();
"""


def missing() -> str | None:
    """Why the peer cannot run here, or None."""
    if shutil.which("node") is None:
        return "node is not installed (Debian's nodejs); telegram-test-api needs it"
    if not (PACKAGE / "package.json").is_file():
        return f"telegram-test-api is not installed in {PACKAGE.parent}; `bash .ci/run` installs it with npm"
    return None


def free_port() -> int:
    """A free loopback port."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _as_telegram(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: (v // 1000 if k in ("date", "edit_date") and isinstance(v, int) and v > 10**11 else _as_telegram(v))
            for k, v in value.items()
            if k != "botToken"
        }
    if isinstance(value, list):
        return [_as_telegram(v) for v in value]
    return value


class TelegramTestApi:
    """The running server (`upstream`) and the shim in front of it (`api_url`, what the adapter talks to)."""

    def __init__(self) -> None:
        self.node_port = free_port()
        self.upstream = f"http://127.0.0.1:{self.node_port}"
        self.shim_port = free_port()
        self.api_url = f"http://127.0.0.1:{self.shim_port}"
        self.webhooks: dict[str, tuple[str, str]] = {}  # token -> (the adapter's URL, secret token)
        self.limited: dict[str, int] = {}  # method -> retry_after of its next call
        self.polls: dict[str, int] = {}  # token -> the number of its latest getUpdates
        self.calls: list[tuple[float, str]] = []  # (monotonic time, method) of each Bot API call
        self._proc: subprocess.Popen[str] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stopped: asyncio.Event | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server and the shim; return once both answer."""
        self._proc = subprocess.Popen(
            ["node", "-e", _SERVER, str(self.node_port)],
            cwd=PACKAGE.parents[1],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self._proc.stdout is not None
        if self._proc.stdout.readline().strip() != "ready":
            raise RuntimeError("telegram-test-api did not start")
        ready = threading.Event()
        self._thread = threading.Thread(target=self._run_shim, args=(ready,), daemon=True)
        self._thread.start()
        if not ready.wait(10):
            raise RuntimeError("the telegram-test-api shim did not start")

    def stop(self) -> None:
        """Stop the shim and the server."""
        if self._loop is not None and self._stopped is not None:
            self._loop.call_soon_threadsafe(self._stopped.set)
        if self._thread is not None:
            self._thread.join(10)
        if self._proc is not None:
            self._proc.terminate()
            self._proc.wait(10)

    def _run_shim(self, ready: threading.Event) -> None:
        asyncio.run(self._shim(ready))

    async def _shim(self, ready: threading.Event) -> None:
        self._loop = asyncio.get_running_loop()
        self._stopped = asyncio.Event()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/bot{token}/{method}", self._bot_method)
        app.router.add_post("/relay/{token}", self._relay)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", self.shim_port).start()
        async with ClientSession() as self._http:
            ready.set()
            await self._stopped.wait()
        await runner.cleanup()

    # -- the shim ---------------------------------------------------------------------------------------------------

    async def _forward(self, token: str, method: str, body: bytes, content_type: str | None) -> tuple[int, Any]:
        headers = {"Content-Type": content_type} if content_type else {}
        async with self._http.post(f"{self.upstream}/bot{token}/{method}", data=body, headers=headers) as response:
            return response.status, await response.json(content_type=None)

    async def _bot_method(self, request: web.Request) -> web.Response:
        token, method = request.match_info["token"], request.match_info["method"]
        self.calls.append((time.monotonic(), method))
        if method in self.limited:
            retry_after = self.limited.pop(method)
            return web.json_response(
                {
                    "ok": False,
                    "error_code": 429,
                    "parameters": {"retry_after": retry_after},
                    "description": f"Too Many Requests: retry after {retry_after}",
                },
                status=429,
            )
        body = await request.read()
        params = _params(body, request.content_type) if request.content_type != "multipart/form-data" else {}
        if method == "setWebhook":
            self.webhooks[token] = (str(params.get("url", "")), str(params.get("secret_token", "")))
            body = json.dumps({"url": f"{self.api_url}/relay/{token}"}).encode()
            status, data = await self._forward(token, method, body, "application/json")
            return web.json_response(data, status=status)
        if method == "deleteWebhook":
            self.webhooks.pop(token, None)
        deadline = time.monotonic() + float(params.get("timeout", 0) or 0) if method == "getUpdates" else 0
        if method == "getUpdates":
            self.polls[token] = self.polls.get(token, 0) + 1
        poll = self.polls.get(token, 0)
        while True:
            if method == "getUpdates" and poll != self.polls[token]:
                # A newer getUpdates (a bot restarted while its last poll waited here): the server would hand an
                # update to this one, mark it read and never send it again, so end it as Telegram does.
                return web.json_response(_CONFLICT, status=409)
            status, data = await self._forward(token, method, body, request.headers.get("Content-Type"))
            if method != "getUpdates" or data.get("result") or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.02)
        if method == "getMe" and isinstance(data.get("result"), dict):
            data["result"].setdefault("is_bot", True)
        return web.json_response(_as_telegram(data), status=status)

    async def _relay(self, request: web.Request) -> web.Response:
        url, secret = self.webhooks.get(request.match_info["token"], ("", ""))
        headers = {"Content-Type": "application/json", **({SECRET_HEADER: secret} if secret else {})}
        async with self._http.post(url, data=json.dumps(_as_telegram(await request.json())), headers=headers) as answer:
            return web.Response(status=answer.status, text=await answer.text())

    def rate_limit(self, method: str, retry_after: int) -> None:
        """Answer the next call of `method` with 429 and `retry_after` (seconds)."""
        self.limited[method] = retry_after

    # -- the user's side ----------------------------------------------------------------------------------------

    def user_message(
        self,
        text: str,
        *,
        chat_id: int = 1,
        user_id: int = 1,
        first_name: str = "Ann",
        username: str = "ann",
        chat_type: str = "private",
        **fields: Any,
    ) -> None:
        """A user writes `text` (telegram-test-api's client `/sendMessage`); `fields` add to the message."""
        chat = {"id": chat_id, "type": chat_type, "first_name": first_name, "username": username}
        message = {
            "botToken": BOT_TOKEN,
            "date": int(time.time()),
            "text": text,
            "chat": chat,
            "from": {"id": user_id, "is_bot": False, "first_name": first_name, "username": username},
            **fields,
        }
        answer = httpx.post(f"{self.upstream}/sendMessage", json=message, timeout=10)
        answer.raise_for_status()

    def bot_messages(self, chat_id: int = 1) -> list[dict[str, Any]]:
        """What the bot sent to `chat_id` since last asked (telegram-test-api's client `/getUpdates`), each as
        stored: `message` holds the Bot API request's fields, `messageId` its id."""
        answer = httpx.post(f"{self.upstream}/getUpdates", json={"token": BOT_TOKEN, "chatId": chat_id}, timeout=10)
        answer.raise_for_status()
        return answer.json()["result"]

    def history(self) -> list[dict[str, Any]]:
        """Every message of the bot's chats, both ways, that the server still holds (deleted ones are gone)."""
        answer = httpx.post(f"{self.upstream}/getUpdatesHistory", json={"token": BOT_TOKEN}, timeout=10)
        answer.raise_for_status()
        return answer.json()["result"]


def _params(body: bytes, content_type: str) -> dict[str, Any]:
    if not body:
        return {}
    if content_type == "application/json":
        return json.loads(body)
    return {k: v[0] for k, v in parse_qs(body.decode()).items()}
