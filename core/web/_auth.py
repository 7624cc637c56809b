"""The console's gate: with a token configured, every request and WebSocket must carry it (`Authorization:
Bearer`, the `hookchat_token` cookie, or `?token=` once, which sets the cookie)."""

from __future__ import annotations

import hmac
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.responses import PlainTextResponse, RedirectResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["TokenGate", "COOKIE"]

COOKIE = "hookchat_token"


class TokenGate:
    """ASGI middleware: lets a request through when `token` is None or the request carries it."""

    def __init__(self, app: ASGIApp, token: str | None) -> None:
        self.app = app
        self.token = token

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.token is None or scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
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
        await PlainTextResponse("hookchat web console: a token is required (open the console's address with "
                                "?token=...)", status_code=401)(scope, receive, send)

    def _ok(self, given: str) -> bool:
        assert self.token is not None
        return hmac.compare_digest(given.encode(), self.token.encode())


def _bearer(value: str) -> str | None:
    scheme, _, token = value.partition(" ")
    return token.strip() or None if scheme.lower() == "bearer" else None


def _cookie(value: str) -> str | None:
    if not value:
        return None
    jar: SimpleCookie[Any] = SimpleCookie()
    try:
        jar.load(value)
    except Exception:  # noqa: BLE001 - a malformed cookie header is simply no token
        return None
    morsel = jar.get(COOKIE)
    return morsel.value if morsel is not None else None
