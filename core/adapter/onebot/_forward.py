"""Forward WebSocket: hookchat dials the implementation's server and keeps dialling, with exponential backoff and
jitter, for as long as the adapter runs."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode, urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import InvalidHandshake, InvalidStatus

from core.utils.backoff import backoff_delay

__all__ = ["dial_forever", "with_token"]

logger = logging.getLogger("hookchat.adapter.onebot")


def with_token(url: str, token: str) -> str:
    """`url` with `access_token=<token>` added to its query (for implementations that cannot read headers)."""
    parts = urlsplit(url)
    query = "&".join(q for q in (parts.query, urlencode({"access_token": token})) if q)
    return urlunsplit(parts._replace(query=query))


async def dial_forever(
    url: str,
    serve: Callable[[ClientConnection, str], Awaitable[bool]],
    *,
    token: str | None,
    token_in: str,
    max_size: int,
    initial: float,
    maximum: float,
) -> None:
    """Connect to `url`, hand each connection to `serve` until it ends, and reconnect; runs until cancelled.

    `serve` returns whether the connection got as far as naming its account; only then does the backoff start
    again from `initial`, so an implementation that accepts and drops at once is not hammered.
    """
    headers = {"Authorization": f"Bearer {token}"} if token and token_in == "header" else {}
    target = with_token(url, token) if token and token_in == "query" else url
    failures = 0
    while True:
        try:
            ws = await connect(
                target,
                additional_headers=headers,
                max_size=max_size,
                compression=None,
                proxy=None,
                open_timeout=10,
                close_timeout=2,
            )
        except InvalidStatus as exc:
            why = f"refused with HTTP {exc.response.status_code}"
            if exc.response.status_code in (401, 403):
                why += " (check the access token)"
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            why = str(exc) or type(exc).__name__
        else:
            try:
                if await serve(ws, url):
                    failures = 0
            finally:
                await ws.close()
            why = "disconnected"
        delay = backoff_delay(failures, initial, maximum)
        log = logger.warning if failures == 0 else logger.info
        log("onebot: %s: %s; reconnecting in %.2f s", url, why, delay)
        failures += 1
        await asyncio.sleep(delay)
