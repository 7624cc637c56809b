"""Callback URLs of remote tools must point at this machine's loopback interface: 127.0.0.0/8, ::1 or `localhost`,
written literally. Nothing is resolved, so a registration cannot make the framework call another host. The rule
itself is `core.utils.net`'s, shared with the listeners and the media URL policy.
"""

from __future__ import annotations

import httpx

from core.utils.net import URLRuleError, check_http_url, is_loopback_host

__all__ = ["LoopbackURLError", "check_loopback_url", "dispatch_url"]


class LoopbackURLError(URLRuleError):
    """A callback URL that is not a plain http(s) URL on the loopback interface; the message says what is wrong."""


def check_loopback_url(url: object) -> httpx.URL:
    """Parse `url` and require http(s) on 127.0.0.0/8, [::1] or localhost, with no user info; returns it parsed."""
    try:
        parsed = check_http_url(url, "callback_url")
    except URLRuleError as exc:
        raise LoopbackURLError(str(exc)) from None
    if not is_loopback_host(parsed.host):
        raise LoopbackURLError(
            f"callback_url host {parsed.host!r} is not loopback: use 127.0.0.1, [::1] or "
            "localhost (names are not resolved)"
        )
    return parsed


def dispatch_url(url: str) -> httpx.URL:
    """The URL actually called for a checked callback URL: `localhost` becomes 127.0.0.1, so no lookup happens."""
    parsed = check_loopback_url(url)
    if parsed.host.lower().rstrip(".") == "localhost":
        return parsed.copy_with(host="127.0.0.1")
    return parsed
