"""Web declarations of KiraAI plugins: `@register.page`, `@register.api`, `@register.ws`, `@register.static` and
`@register.widget`, with `PluginPage` and `PageMenu`.

Declaring does nothing but record what was declared on the method, so a plugin that uses them loads whether or not
a web console runs; the web console reads them from the loaded plugin with `web_declarations(plugin)` and mounts
them under the plugin's id (`/page/plugin/<id>/...`, `/api/plugin/<id>/...`), removing them when it stops.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from core.utils.declarations import declared

__all__ = [
    "PageMenu",
    "PluginPage",
    "PluginPageSource",
    "WebDeclaration",
    "WEB_ATTR",
    "declare_web",
    "web_declarations",
]

WEB_ATTR = "__hookchat_web__"
HTTP_METHODS = frozenset({"GET", "POST", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"})
WIDGET_COLORS = frozenset({"blue", "green", "purple", "yellow", "red", "gray"})

F = TypeVar("F", bound=Callable[..., Any])


class PageMenu:
    """How a plugin page appears in the web console's sidebar: `label` (text, or a dict of locale to text),
    `icon` (an Element Plus icon name) and `order` (lower comes first)."""

    def __init__(self, label: str | Mapping[str, str], icon: str | None = None, order: int = 100) -> None:
        if isinstance(label, str):
            if not label.strip():
                raise ValueError("PageMenu label must not be empty")
        elif isinstance(label, Mapping):
            if not label or not all(isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in label.items()):
                raise ValueError("PageMenu label dict maps locale codes to non-empty strings")
            label = dict(label)
        else:
            raise TypeError(f"PageMenu label must be a str or a dict of locale to str, not {type(label).__name__}")
        if icon is not None and not isinstance(icon, str):
            raise TypeError(f"PageMenu icon must be a str, not {type(icon).__name__}")
        if not isinstance(order, int) or isinstance(order, bool):
            raise TypeError(f"PageMenu order must be an int, not {type(order).__name__}")
        self.label = label
        self.icon = icon
        self.order = order

    def dict(self) -> dict[str, Any]:
        """The menu as a dict (`label`, `icon`, `order`)."""
        return {"label": self.label, "icon": self.icon, "order": self.order}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PageMenu) and self.dict() == other.dict()

    def __repr__(self) -> str:
        return f"PageMenu({self.label!r}, icon={self.icon!r}, order={self.order})"


class PluginPageSource(enum.StrEnum):
    """Where a page's content comes from."""

    FOLDER = "folder"
    URL = "url"
    HTML = "html"


@dataclass(frozen=True, slots=True)
class PluginPage:
    """What a page handler returns: `PluginPage.from_folder("./web")` (files inside the plugin's folder),
    `from_url(url)` (a redirect) or `from_html(text)`."""

    source: PluginPageSource
    source_value: str

    @classmethod
    def from_folder(cls, path: str) -> PluginPage:
        """Serve the files of `path`, relative to the plugin's folder (it must stay inside it)."""
        return cls(PluginPageSource.FOLDER, path)

    @classmethod
    def from_url(cls, url: str) -> PluginPage:
        """Redirect to `url`."""
        return cls(PluginPageSource.URL, url)

    @classmethod
    def from_html(cls, html: str) -> PluginPage:
        """Serve `html`."""
        return cls(PluginPageSource.HTML, html)


@dataclass(frozen=True, slots=True)
class WebDeclaration:
    """One web declaration on a plugin method: its `kind` ("page", "api", "ws", "static", "widget"), the `path`
    (a route relative to the plugin's prefix; a widget's id is its method name), whether it needs `auth`, and the
    rest of the decorator's arguments in `options` (`method`, `menu`, `directory`, `html`, `label`, ...)."""

    kind: Literal["page", "api", "ws", "static", "widget"]
    path: str
    auth: bool = True
    options: dict[str, Any] = field(default_factory=dict)


def _route(path: object, what: str) -> str:
    if not isinstance(path, str) or not path.startswith("/") or ".." in path.split("/"):
        raise ValueError(f"{what} path must be a string starting with '/', without '..', not {path!r}")
    return path


def declare_web(kind: str, path: str, auth: bool = True, **options: Any) -> Callable[[F], F]:
    """Record a web declaration on the decorated method (several may stack on one method)."""
    if kind == "api":
        method = str(options.get("method", "")).upper()
        if method not in HTTP_METHODS:
            raise ValueError(f"@register.api method must be one of {', '.join(sorted(HTTP_METHODS))}, not {method!r}")
        options["method"] = method
    if kind == "page" and isinstance(options.get("menu"), Mapping):
        options["menu"] = PageMenu(**options["menu"])
    if kind == "widget":
        if options.get("color") not in WIDGET_COLORS:
            raise ValueError(f"@register.widget color must be one of {', '.join(sorted(WIDGET_COLORS))}")
        if options.get("size") not in ("small", "wide"):
            raise ValueError("@register.widget size must be 'small' or 'wide'")
    else:
        path = _route(path, f"@register.{kind}")
    if not isinstance(auth, bool):
        raise TypeError(f"@register.{kind} auth must be True or False")

    def decorate(fn: F) -> F:
        if not callable(fn):
            raise TypeError(f"@register.{kind} decorates a plugin method, not {type(fn).__name__}")
        found = (*getattr(fn, WEB_ATTR, ()), WebDeclaration(kind, path or fn.__name__, auth, options))  # type: ignore[arg-type]
        setattr(fn, WEB_ATTR, found)
        return fn

    return decorate


def web_declarations(plugin: object) -> list[tuple[WebDeclaration, Callable[..., Any]]]:
    """The web declarations of a plugin (instance or class), each with its handler (bound for an instance), in
    source order; for one method, in the order its decorators are written."""
    out: list[tuple[WebDeclaration, Callable[..., Any]]] = []
    for name, fn in declared(plugin, WEB_ATTR):
        handler = getattr(plugin, name) if not isinstance(plugin, type) else fn
        out.extend((d, handler) for d in reversed(getattr(fn, WEB_ATTR)))
    return out
