"""Callback URLs of remote tools must point at this machine's loopback interface: 127.0.0.0/8, ::1 or `localhost`,
written literally. Nothing is resolved, so a registration cannot make the framework call another host.
"""

from __future__ import annotations

import ipaddress

import httpx

__all__ = ["LoopbackURLError", "check_loopback_url", "dispatch_url"]


class LoopbackURLError(ValueError):
    """A callback URL that is not a plain http(s) URL on the loopback interface; the message says what is wrong."""


def check_loopback_url(url: object) -> httpx.URL:
    """Parse `url` and require http(s) on 127.0.0.0/8, [::1] or localhost, with no user info; returns it parsed."""
    if not isinstance(url, str) or not url:
        raise LoopbackURLError("callback_url must be a non-empty string")
    if any(ch.isspace() or ord(ch) < 32 for ch in url) or "\\" in url:
        raise LoopbackURLError("callback_url must not contain spaces, control characters or backslashes")
    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decodes an IDNA (xn--) name, which may itself be invalid
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise LoopbackURLError(f"callback_url is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise LoopbackURLError(f"callback_url must use http or https, not {parsed.scheme or 'nothing'!r}")
    if parsed.userinfo:
        raise LoopbackURLError("callback_url must not contain user info (user:password@)")
    if not host:
        raise LoopbackURLError("callback_url has no host")
    if host.lower() == "localhost":
        return parsed
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise LoopbackURLError(
            f"callback_url host {host!r} is not loopback: use 127.0.0.1, [::1] or localhost (names are not resolved)"
        ) from None
    if isinstance(address, ipaddress.IPv4Address) and address in ipaddress.IPv4Network("127.0.0.0/8"):
        return parsed
    if isinstance(address, ipaddress.IPv6Address) and address == ipaddress.IPv6Address("::1"):
        return parsed
    raise LoopbackURLError(f"callback_url host {host!r} is not loopback (127.0.0.0/8, ::1 or localhost)")


def dispatch_url(url: str) -> httpx.URL:
    """The URL actually called for a checked callback URL: `localhost` becomes 127.0.0.1, so no lookup happens."""
    parsed = check_loopback_url(url)
    if parsed.host.lower() == "localhost":
        return parsed.copy_with(host="127.0.0.1")
    return parsed
