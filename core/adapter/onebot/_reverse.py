"""Reverse WebSocket: hookchat serves `ws://host:port/path` and implementations connect to it, one Universal
connection per bot account, named by `X-Self-ID` and checked against the access token before the upgrade."""

from __future__ import annotations

import hmac
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.http11 import Request, Response

__all__ = ["serve_reverse", "bearer_token"]

logger = logging.getLogger("hookchat.adapter.onebot")


def bearer_token(request: Request) -> str | None:
    """The token a connecting implementation presents: `Authorization: Bearer <token>` (the spec's way), else an
    `access_token` query parameter."""
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() in ("bearer", "token") and value.strip():
        return value.strip()
    values = parse_qs(urlsplit(request.path).query).get("access_token")
    return values[0] if values else None


async def serve_reverse(
    on_connection: Callable[[ServerConnection, str], Awaitable[None]],
    *,
    host: str,
    port: int,
    path: str,
    token: str | None,
    self_ids: list[str],
    max_size: int,
) -> Server:
    """Listen on host:port and hand every accepted connection, with its `X-Self-ID`, to `on_connection`.

    Refused before the upgrade, with the reason in the body: another path (404), no `X-Self-ID` or a role other
    than `Universal` (400), no token (401), a wrong token or an account not in `self_ids` (403). Raises `OSError`
    when the address is taken.
    """

    def check(connection: ServerConnection, request: Request) -> Response | None:
        refusal = _refusal(request, path=path, token=token, self_ids=self_ids)
        if refusal is None:
            return None
        status, reason = refusal
        logger.warning("onebot: refused a reverse connection from %s: %s", connection.remote_address, reason)
        return connection.respond(status, reason + "\n")

    async def handler(connection: ServerConnection) -> None:
        assert connection.request is not None
        await on_connection(connection, connection.request.headers["X-Self-ID"].strip())

    return await serve(handler, host, port, process_request=check, max_size=max_size, compression=None, close_timeout=2)


def _refusal(request: Request, *, path: str, token: str | None, self_ids: list[str]) -> tuple[int, str] | None:
    if urlsplit(request.path).path.rstrip("/") != path.rstrip("/"):
        return 404, f"OneBot connections go to {path}"
    self_id = request.headers.get("X-Self-ID", "").strip()
    if not self_id:
        return 400, "the X-Self-ID header (the bot account) is required"
    role = request.headers.get("X-Client-Role", "")
    if role.lower() != "universal":
        return 400, f"X-Client-Role must be Universal, not {role or 'missing'} (use one connection for API and events)"
    if token:
        given = bearer_token(request)
        if given is None:
            return 401, "an access token is required (Authorization: Bearer <token>)"
        if not hmac.compare_digest(given.encode(), token.encode()):
            return 403, "wrong access token"
    if self_ids and self_id not in self_ids:
        return 403, f"bot account {self_id} is not in this adapter's self_ids"
    return None
