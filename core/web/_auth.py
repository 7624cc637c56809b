"""The console's gate and its token. Every request and WebSocket must name an allowed `Host` (DNS rebinding), carry
no `Origin` but the console's own (another site, or another port, in the same browser), and carry the token
(`Authorization: Bearer`, the `hookchat_token` cookie, or `?token=` once, which sets the cookie). The token always
exists: configured, or generated at the first start and kept in the data directory, readable by its owner only."""

from __future__ import annotations

import hmac
import html
import os
import secrets
import stat
from http.cookies import SimpleCookie
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from core.utils.log import get_logger
from core.utils.net import is_loopback_host

__all__ = ["COOKIE", "ConsoleGate", "TOKEN_FILE_NAME", "stored_token"]

_log = get_logger("web")
COOKIE = "hookchat_token"
#: The generated token, under the data directory.
TOKEN_FILE_NAME = "web/token"


def stored_token(data_dir: Path) -> str:
    """The console token kept in `<data_dir>/web/token`, generated (and the file created, mode 0600) on first use.

    A file other users can read is made private again, with a warning: they could have read the token, so it is
    replaced too. `OSError` when the data directory cannot hold it."""
    path = Path(data_dir) / TOKEN_FILE_NAME
    if path.is_file():
        mode = stat.S_IMODE(path.stat().st_mode)
        token = path.read_text(encoding="utf-8").strip()
        if mode & 0o077:
            _log.warning(
                "the web console's token file %s was readable by other users (mode %o): replaced by a new "
                "token, readable by its owner only",
                path,
                mode,
            )
            path.unlink()
        elif len(token) >= 16:
            return token
        else:
            path.unlink()  # empty or cut short: a weak token is no token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never a moment readable by others
    except FileExistsError:  # another start of this bot wrote it at the same moment: use that one
        theirs = path.read_text(encoding="utf-8").strip()
        if len(theirs) < 16:
            raise OSError(f"{path} is being written by another start of this bot; start again") from None
        return theirs
    with os.fdopen(fd, "w", encoding="utf-8") as file:
        file.write(token + "\n")
    return token


class ConsoleGate:
    """ASGI middleware in front of the console: Host, then Origin, then token; see the module docstring.

    `allowed_hosts` are the names a browser may reach the console by (`"*"`: any); a literal loopback address
    always passes, since DNS rebinding needs a name. A request with an `Origin` other than the console's own is
    refused whatever its method; one with none is not a script's cross-origin request (browsers send `Origin` on
    every WebSocket, every POST, PUT and DELETE, and every cross-origin fetch), so it is judged by its token alone.
    """

    def __init__(self, app: ASGIApp, token: str, allowed_hosts: list[str]) -> None:
        if not token:
            raise ValueError("the console gate needs a token")
        self.app = app
        self.token = token
        self.any_host = "*" in allowed_hosts
        self.allowed_hosts = frozenset(_host_name(h) for h in allowed_hosts if h != "*")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not self.host_allowed(host):
            await self._refuse(
                scope,
                receive,
                send,
                403,
                f"hookchat web console: Host {host!r} is not one of "
                "[web] allowed_hosts (add the name there if you reach the console by it)",
            )
            return
        origin = headers.get("origin")
        if origin is not None and not _same_origin(origin, host):
            await self._refuse(
                scope, receive, send, 403, f"hookchat web console: a request from {origin} is refused (cross-origin)"
            )
            return
        if scope["type"] == "http":
            send = _not_framed_elsewhere(send)
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = _bearer(headers.get("authorization", "")) or _cookie(headers.get("cookie", ""))
        from_query = query.get("token")
        if given is not None and self._ok(given):
            await self.app(scope, receive, send)
            return
        if from_query is not None and self._ok(from_query):
            if scope["type"] == "http" and scope.get("method") == "GET":
                # Drop the token from the address bar (and from history): the cookie carries it from now on.
                rest = urlencode([(k, v) for k, v in query.items() if k != "token"])
                response = RedirectResponse(scope["path"] + (f"?{rest}" if rest else ""), status_code=303)
                response.set_cookie(COOKIE, from_query, httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": "token required"})
            return
        if "text/html" in headers.get("accept", ""):
            await _login_page(scope["path"], host, wrong=from_query is not None)(scope, receive, send)
            return
        await PlainTextResponse(
            "hookchat web console: a token is required (open the address hookchat printed at start-up, .../?token=...)",
            status_code=401,
        )(scope, receive, send)

    def host_allowed(self, host_header: str) -> bool:
        """Whether a request with this `Host` header may reach the console."""
        name = _host_name(host_header)
        return bool(name) and (
            self.any_host
            or name in self.allowed_hosts
            or (is_loopback_host(name) and name != "localhost" and not name.endswith("."))
        )

    def _ok(self, given: str) -> bool:
        return hmac.compare_digest(given.encode(), self.token.encode())

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, reason: str) -> None:
        _log.warning("%s %s refused: %s", scope["type"], scope.get("path", ""), reason)
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008, "reason": reason[:120]})
            return
        await PlainTextResponse(reason, status_code=status)(scope, receive, send)


#: No page of another origin may frame the console: a page on another port of 127.0.0.1 is the same site, so the
#: framed console would have its cookie, and clicks lured onto it (clickjacking) would be the console's own.
_FRAME_HEADERS = [(b"x-frame-options", b"SAMEORIGIN"), (b"content-security-policy", b"frame-ancestors 'self'")]


def _not_framed_elsewhere(send: Send) -> Send:
    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), *_FRAME_HEADERS]}
        await send(message)

    return sending


def _host_name(value: str) -> str:
    """The host of a `Host` header (or a configured name), lower case, without port or brackets."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else ""
    if value.count(":") == 1:
        value = value.split(":", 1)[0]
    return value


def _same_origin(origin: str, host_header: str) -> bool:
    """Whether the browser's `Origin` is the console itself, as the browser reached it (same host and port)."""
    try:
        parts = urlsplit(origin)
    except ValueError:
        return False
    return (
        parts.scheme in ("http", "https") and bool(parts.netloc) and parts.netloc.lower() == host_header.strip().lower()
    )


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _cookie(value: str) -> str | None:
    if not value:
        return None
    jar = SimpleCookie()
    try:
        jar.load(value)
    except Exception:
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None


def _login_page(path: str, host: str, *, wrong: bool) -> Response:
    """What a browser without the token sees: where to find it, and a field to paste it into."""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>hookchat console: token required</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font:15px/1.5 system-ui,sans-serif;max-width:36rem;margin:4rem auto;padding:0 1rem;color:#222}}
code{{background:#f2f2f2;padding:.1em .3em}}input{{font:inherit;width:100%;padding:.4em;margin:.5em 0}}
button{{font:inherit;padding:.4em 1.2em}}</style></head>
<body><h1>This console needs its token</h1>
<p>hookchat printed the console's address with its token when it started, for example
<code>http://{html.escape(host)}/?token=&hellip;</code>: open that address. The token is also in the file
<code>web/token</code> of the bot's data directory (or the variable named by <code>[web] token_env</code>).</p>
{"<p><strong>That token is not this console&rsquo;s.</strong></p>" if wrong else ""}
<form method="get" action="{html.escape(path, quote=True)}"><label for="token">Or paste the token:</label>
<input id="token" name="token" type="password" autocomplete="off" required autofocus>
<button type="submit">Open the console</button></form></body></html>"""
    return HTMLResponse(body, status_code=401)
