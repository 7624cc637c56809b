"""Web pages and HTTP endpoints a plugin declares for the web console, as KiraAI declares them: `PluginPage`,
`PageMenu`, and the markers behind `@register.page(route)` and `@register.api(method, path)`.

The declarations only mark methods; the web console mounts them under the plugin's id while the plugin is loaded.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

__all__ = ["PluginPage", "PageMenu", "PageSource", "PageMeta", "ApiMeta", "PAGE_ATTR", "API_ATTR", "check_route"]

PAGE_ATTR = "__hookchat_page__"
API_ATTR = "__hookchat_api__"
_ROUTE = re.compile(r"^/?[A-Za-z0-9_.~\-/{}:]*$")
_METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})


class PageSource(str, Enum):
    """Where a plugin page's content comes from."""

    FOLDER = "folder"
    URL = "url"
    HTML = "html"


@dataclass(frozen=True)
class PluginPage:
    """What a page shows: `PluginPage.from_folder("./web")` (static files inside the plugin's folder, `index.html`
    for the page itself), `from_url(url)` (a redirect) or `from_html(text)` (one page of inline HTML)."""

    source: PageSource
    source_value: str

    @classmethod
    def from_folder(cls, path: str) -> PluginPage:
        """Static files from `path`, relative to the plugin's folder; a path leading outside it is refused."""
        return cls(PageSource.FOLDER, path)

    @classmethod
    def from_url(cls, url: str) -> PluginPage:
        """A redirect to `url`."""
        return cls(PageSource.URL, url)

    @classmethod
    def from_html(cls, html: str) -> PluginPage:
        """One page of HTML."""
        return cls(PageSource.HTML, html)


@dataclass(frozen=True)
class PageMenu:
    """How a page is listed in the console's menu: `label` (text, or locale -> text), `icon`, `order` (lower first)."""

    label: str | dict[str, str]
    icon: str | None = None
    order: int = 100

    def __post_init__(self) -> None:
        labels = self.label.values() if isinstance(self.label, dict) else [self.label]
        if not isinstance(self.label, (str, dict)) or not all(isinstance(v, str) and v.strip() for v in labels):
            raise ValueError(f"a PageMenu label is a non-empty string or a dict of them, not {self.label!r}")
        if not isinstance(self.order, int) or isinstance(self.order, bool):
            raise TypeError(f"a PageMenu order is an int, not {self.order!r}")

    def text(self, locale: str = "en") -> str:
        """The label for `locale` (English, else the first one, when a dict has no such locale)."""
        if isinstance(self.label, str):
            return self.label
        return self.label.get(locale) or self.label.get("en") or next(iter(self.label.values()))


@dataclass(frozen=True)
class PageMeta:
    """What `@register.page` recorded on a method."""

    route: str
    auth: bool = True
    menu: PageMenu | None = None


@dataclass(frozen=True)
class ApiMeta:
    """What `@register.api` recorded on a method."""

    method: str
    path: str
    auth: bool = True
    options: dict[str, Any] = field(default_factory=dict)


def check_route(route: str, what: str) -> str:
    """`route` with one leading '/', or ValueError saying what is wrong."""
    if not isinstance(route, str) or not _ROUTE.match(route) or ".." in route:
        raise ValueError(f"{what} {route!r} is not a path: use letters, digits and - _ . ~ / (no '..')")
    return "/" + route.strip("/")


def page_meta(route: str, auth: bool, menu: PageMenu | dict[str, Any] | None) -> PageMeta:
    """A checked page declaration (a menu given as a dict becomes a `PageMenu`)."""
    return PageMeta(check_route(route, "page route"), auth, PageMenu(**menu) if isinstance(menu, dict) else menu)


def api_meta(method: str, path: str, auth: bool, options: dict[str, Any]) -> ApiMeta:
    """A checked endpoint declaration."""
    verb = method.upper() if isinstance(method, str) else method
    if verb not in _METHODS:
        raise ValueError(f"HTTP method {method!r} is not one of {', '.join(sorted(_METHODS))}")
    return ApiMeta(verb, check_route(path, "API path"), auth, dict(options))
