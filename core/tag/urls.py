"""What output tags the model (and so anyone who writes to it) steers may do beyond sending local files: mention
everyone in a group, and hand a URL to the platform to fetch. Both need the operator's consent (`[media]`): by
default `<at id="all"/>` is sent as plain text, and a media URL must be public http(s), checked after DNS
resolution with `core.utils.net`'s rule (no loopback, link-local, private or other non-global address)."""

from __future__ import annotations

import socket
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio

if TYPE_CHECKING:
    import httpx

from core.utils.net import (
    IPNetwork,
    URLRuleError,
    address_allowed,
    check_http_url,
    parse_allowances,
    public_address_error,
)

__all__ = ["MENTION_ALL_IDS", "MediaPolicy", "MediaURLError", "is_mention_all"]

#: Mention ids that reach everyone in a group: OneBot's `all`, Discord's and Slack's `everyone`/`here`.
MENTION_ALL_IDS = frozenset({"all", "everyone", "here"})


class MediaURLError(PermissionError):
    """A tag named a URL the policy refuses; the message is the reason (logged, never shown to the user)."""


def is_mention_all(user_id: str) -> bool:
    """Whether mentioning `user_id` mentions everyone (`all`, `@everyone`, `here`...)."""
    return user_id.strip().lstrip("@").lower() in MENTION_ALL_IDS


@dataclass(frozen=True, slots=True)
class MediaPolicy:
    """The operator's consent for model-steered tags (`[media] allow_mention_all`, `allowed_url_hosts`).

    `allowed_hosts` are host names a media URL may name whatever they resolve to (the operator vouches for
    them); `allowed_networks` are address ranges allowed besides public ones (`192.168.1.0/24` for a LAN
    file server). `resolve_timeout` bounds the DNS lookup of a URL's host.
    """

    allow_mention_all: bool = False
    allowed_hosts: frozenset[str] = frozenset()
    allowed_networks: tuple[IPNetwork, ...] = ()
    resolve_timeout: float = 5.0

    @classmethod
    def from_settings(cls, *, allow_mention_all: bool = False, allowed_url_hosts: Sequence[str] = ()) -> MediaPolicy:
        """The policy of the `[media]` settings; `ValueError` naming `media.allowed_url_hosts` for a bad entry."""
        names, networks = parse_allowances(list(allowed_url_hosts), "media.allowed_url_hosts")
        return cls(allow_mention_all=allow_mention_all, allowed_hosts=names, allowed_networks=networks)

    async def check_url(self, url: str) -> httpx.URL:
        """`url` parsed, when a tag may hand it to the platform; `MediaURLError` saying why not otherwise.

        Every address the host resolves to must be public (or in `allowed_networks`): the platform may pick any
        of them. A host that does not resolve in `resolve_timeout` is refused too.
        """
        try:
            parsed = check_http_url(url, "a media URL")
        except URLRuleError as exc:
            raise MediaURLError(str(exc)) from None
        host = parsed.host.lower().rstrip(".")
        if host in self.allowed_hosts:
            return parsed
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            with anyio.fail_after(self.resolve_timeout):
                found = await anyio.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except TimeoutError:
            raise MediaURLError(f"{host} did not resolve within {self.resolve_timeout:g} s") from None
        except (OSError, UnicodeError) as exc:
            raise MediaURLError(f"{host} does not resolve: {exc}") from None
        addresses = sorted({str(info[4][0]) for info in found})
        if not addresses:
            raise MediaURLError(f"{host} resolves to no address")
        for address in addresses:
            if address_allowed(address, self.allowed_networks):
                continue
            reason = public_address_error(address)
            if reason is not None:
                via = "" if address == host.strip("[]") else f"{host} resolves to {address}: "
                raise MediaURLError(f"{via}{reason} (allow it with [media] allowed_url_hosts)")
        return parsed
