"""The one rule for which addresses are whose: loopback hosts (what a listener may serve without leaving this
machine, and where remote-tool callbacks may point), public addresses (the only ones a URL that users or the model
steer may reach), and the checks an http(s) URL passes before either.

`check_http_url` parses; `is_loopback_host` classifies a host as written (no lookup); `public_address_error`
classifies one resolved address. `core.server` (callbacks, the registry's listener), `core.tag` (media URLs), the
OneBot reverse listener and the web console build on these.
"""

from __future__ import annotations

import ipaddress
import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # httpx (with rich, some 100 ms) loads when a URL is first checked, not at every start
    import httpx

__all__ = [
    "InsecureListenerError",
    "LOOPBACK_NAMES",
    "URLRuleError",
    "address_allowed",
    "check_http_url",
    "is_loopback_host",
    "parse_allowances",
    "public_address_error",
]

#: Host names that mean this machine without a lookup.
LOOPBACK_NAMES = ("localhost",)

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


class InsecureListenerError(RuntimeError):
    """A listener bound beyond loopback without a token: it refuses to start. The message names the config key
    that gives it one."""


class URLRuleError(ValueError):
    """A URL refused by one of the rules of this module; the message says which and why."""


def check_http_url(url: object, what: str = "the URL") -> httpx.URL:
    """`url` parsed, when it is a plain http(s) URL with a host and no user info, spaces, control characters or
    backslashes (each of which parsers disagree on); `URLRuleError` naming `what` otherwise."""
    if not isinstance(url, str) or not url:
        raise URLRuleError(f"{what} must be a non-empty string")
    if any(ch.isspace() or ord(ch) < 32 or ord(ch) == 127 for ch in url) or "\\" in url:
        raise URLRuleError(f"{what} must not contain spaces, control characters or backslashes")
    import httpx

    try:
        parsed = httpx.URL(url)
        host = parsed.host  # decodes an IDNA (xn--) name, which may itself be invalid
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        raise URLRuleError(f"{what} is not a valid URL: {exc}") from None
    if parsed.scheme not in ("http", "https"):
        raise URLRuleError(f"{what} must use http or https, not {parsed.scheme or 'nothing'!r}")
    if parsed.userinfo:
        raise URLRuleError(f"{what} must not contain user info (user:password@)")
    if not host:
        raise URLRuleError(f"{what} has no host")
    return parsed


def _address(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def is_loopback_host(host: str) -> bool:
    """Whether `host`, as written, is this machine's loopback interface: 127.0.0.0/8, ::1 or `localhost`. Nothing
    is resolved (any other name is not loopback), and no other spelling counts (not `::ffff:127.0.0.1`)."""
    if host.lower().rstrip(".") in LOOPBACK_NAMES:
        return True
    address = _address(host)
    return address is not None and address.is_loopback


def public_address_error(address: str) -> str | None:
    """Why the resolved `address` is not a public (globally routed) one, or None when it is: loopback,
    link-local (169.254/16, fe80::/10: cloud metadata services live there), private (10/8, 172.16/12, 192.168/16,
    fc00::/7), shared (100.64/10), multicast, reserved or unspecified addresses are all refused."""
    parsed = _address(address)
    if parsed is None:
        return f"{address!r} is not an IP address"
    if isinstance(parsed, ipaddress.IPv6Address):
        embedded = parsed.ipv4_mapped or parsed.sixtofour or (parsed.teredo[1] if parsed.teredo else None)
        if embedded is not None:  # ::ffff:169.254.169.254 reaches the IPv4 address
            reason = public_address_error(str(embedded))
            return f"{address} embeds {embedded}: {reason}" if reason else None
    for kind, flag in (
        ("loopback", parsed.is_loopback),
        ("link-local", parsed.is_link_local),
        ("multicast", parsed.is_multicast),
        ("unspecified", parsed.is_unspecified),
        ("private", parsed.is_private),
        ("reserved", parsed.is_reserved),
    ):
        if flag:
            return f"{address} is a {kind} address"
    if not parsed.is_global:
        return f"{address} is not a public address"
    return None


def parse_allowances(entries: list[str], what: str) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    """An operator's list of allowed hosts: host names (matched case-insensitively, as written) and IP addresses
    or networks (`10.0.0.0/8`, `fd00::/8`). `ValueError` naming `what` for an entry that is neither."""
    names: set[str] = set()
    networks: list[IPNetwork] = []
    for entry in entries:
        text = entry.strip().lower().rstrip(".")
        network = _network(text)
        if network is not None:
            networks.append(network)
        elif re.fullmatch(r"[a-z0-9_-]+(\.[a-z0-9_-]+)*", text):
            names.add(text)
        else:
            raise ValueError(f"{what}: {entry!r} is neither a host name nor an IP address or network")
    return frozenset(names), tuple(networks)


def _network(text: str) -> IPNetwork | None:
    try:
        return ipaddress.ip_network(text.strip("[]"), strict=False)
    except ValueError:
        return None


def address_allowed(address: str, networks: tuple[IPNetwork, ...]) -> bool:
    """Whether the resolved `address` lies in one of the operator's allowed `networks`."""
    parsed = _address(address)
    return parsed is not None and any(parsed in network for network in networks)
