"""Plugin pages and endpoints in the console, where KiraAI puts them: `/page/plugin/<plugin_id><route>` and
`/api/plugin/<plugin_id><path>`. They are looked up on each request among the declarations of the plugin as it is
loaded now, so they belong to the plugin: a stopped plugin has none, a reloaded one has its new ones."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import compile_path
from starlette.types import Receive, Scope, Send

from core.app import HookChat
from core.plugin import PluginPage, PluginPageSource, WebDeclaration, web_declarations

__all__ = ["PluginPages"]

_log = logging.getLogger("hookchat.web")


def _problem(status: int, message: str) -> JSONResponse:
    return JSONResponse({"ok": False, "error": message}, status_code=status)


class PluginPages:
    """The ASGI apps behind `/page/plugin` (`pages`) and `/api/plugin` (`apis`)."""

    def __init__(self, app: HookChat) -> None:
        self.app = app

    # -- pages ------------------------------------------------------------------------------------------------------

    @staticmethod
    def _declared(instance: Any, kind: str) -> list[tuple[WebDeclaration, Any]]:
        return [(d, handler) for d, handler in web_declarations(instance) if d.kind == kind]

    def menu(self) -> list[dict[str, Any]]:
        """The pages to list in the console's menu, by `PageMenu.order`: plugin id, label, icon, address."""
        items = []
        for plugin_id in self.app.plugins.loaded_ids():
            instance = self.app.plugins.get_plugin(plugin_id)
            for meta, _ in self._declared(instance, "page"):
                menu = meta.options.get("menu")
                if menu is not None:
                    label = (
                        menu.label
                        if isinstance(menu.label, str)
                        else (menu.label.get("en") or next(iter(menu.label.values())))
                    )
                    items.append(
                        {
                            "plugin_id": plugin_id,
                            "label": label,
                            "icon": menu.icon,
                            "order": menu.order,
                            "url": f"/page/plugin/{plugin_id}{meta.path}",
                        }
                    )
        return sorted(items, key=lambda item: (item["order"], item["plugin_id"], item["url"]))

    async def pages(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve `/page/plugin/<plugin_id><route>[/file]`."""
        request = Request(scope, receive)
        response = await self._page(request)
        await response(scope, receive, send)

    async def _page(self, request: Request) -> Response:
        tail = _tail(request, "/page/plugin/")
        if "\x00" in tail:  # `%00`: no file name holds it, and the file system refuses it (ValueError)
            return _problem(404, "no such page (a path cannot contain a NUL character)")
        plugin_id, _, rest = tail.partition("/")
        instance = self.app.plugins.get_plugin(plugin_id)
        if instance is None:
            return _problem(404, f"plugin {plugin_id!r} is not loaded")
        sub = "/" + rest
        for meta, method in self._declared(instance, "page"):
            if sub != meta.path and not sub.startswith(meta.path.rstrip("/") + "/"):
                continue
            try:
                page = method()
                if inspect.isawaitable(page):
                    page = await page
            except Exception:
                _log.exception("plugin %r: page %s failed", plugin_id, meta.path)
                return _problem(500, f"plugin {plugin_id!r}: the page {meta.path} failed (see the logs)")
            if not isinstance(page, PluginPage):
                return _problem(500, f"plugin {plugin_id!r}: page {meta.path} must return a PluginPage")
            if page.source is PluginPageSource.HTML:
                return HTMLResponse(page.source_value)
            if page.source is PluginPageSource.URL:
                return RedirectResponse(page.source_value)
            return await self._file(plugin_id, page, sub[len(meta.path.rstrip("/")) :])
        return _problem(404, f"plugin {plugin_id!r} has no page {sub}")

    async def _file(self, plugin_id: str, page: PluginPage, inner: str) -> Response:
        source = self.app.plugins.source(plugin_id)
        root = source.path if source is not None else None
        if root is None:
            return _problem(404, f"plugin {plugin_id!r} has no folder to serve pages from")
        # a few stats of the plugin's own folder, cheaper than a hop to a worker thread
        folder = (Path(root) / page.source_value).resolve()
        if not folder.is_relative_to(Path(root).resolve()) or not folder.is_dir():  # noqa: ASYNC240 - see above
            return _problem(
                404, f"plugin {plugin_id!r}: the page folder {page.source_value!r} is not a folder inside the plugin"
            )
        target = (folder / inner.lstrip("/")).resolve()
        if not target.is_relative_to(folder):
            return _problem(404, "no such file")
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            return _problem(404, "no such file")
        return FileResponse(target)

    # -- endpoints --------------------------------------------------------------------------------------------------

    async def apis(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve `/api/plugin/<plugin_id><path>`."""
        request = Request(scope, receive)
        response = await self._api(request)
        await response(scope, receive, send)

    async def _api(self, request: Request) -> Response:
        plugin_id, _, rest = _tail(request, "/api/plugin/").partition("/")
        instance = self.app.plugins.get_plugin(plugin_id)
        if instance is None:
            return _problem(404, f"plugin {plugin_id!r} is not loaded")
        sub = "/" + rest.rstrip("/") if rest.strip("/") else "/"
        allowed = []
        for meta, handler in self._declared(instance, "api"):
            regex, _, convertors = compile_path(meta.path)
            match = regex.match(sub)
            if match is None:
                continue
            verb = meta.options["method"]
            if verb != request.method:
                allowed.append(verb)
                continue
            params = {k: convertors[k].convert(v) for k, v in match.groupdict().items()}
            return await self._call(plugin_id, meta, handler, request, params)
        if allowed:
            return _problem(405, f"{request.method} is not allowed here; use {', '.join(allowed)}")
        return _problem(404, f"plugin {plugin_id!r} has no endpoint {sub}")

    async def _call(
        self, plugin_id: str, meta: WebDeclaration, method: Any, request: Request, path_params: dict[str, Any]
    ) -> Response:
        try:
            kwargs = await _arguments(method, request, path_params)
        except ValueError as exc:
            return _problem(400 if "JSON" in str(exc) or "not a" in str(exc) else 422, str(exc))
        try:
            result = await method(**kwargs)
        except (TypeError, ValueError) as exc:
            return _problem(400, f"{type(exc).__name__}: {exc}")
        except Exception:
            verb = meta.options["method"]
            _log.exception("plugin %r: endpoint %s %s failed", plugin_id, verb, meta.path)
            return _problem(500, f"plugin {plugin_id!r}: {verb} {meta.path} failed (see the logs)")
        if isinstance(result, Response):
            return result
        if isinstance(result, str):
            return PlainTextResponse(result)
        return JSONResponse(result)


async def _arguments(method: Any, request: Request, path_params: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of an endpoint: `request`, path parameters, `body` (JSON), query parameters by name;
    ValueError saying which is missing or malformed."""
    kwargs: dict[str, Any] = {}
    for name, param in inspect.signature(method).parameters.items():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        if name == "request" or param.annotation in (Request, "Request"):
            kwargs[name] = request
        elif name in path_params:
            kwargs[name] = path_params[name]
        elif name == "body":
            try:
                kwargs[name] = await request.json()
            except ValueError:
                raise ValueError("the body must be JSON") from None
        elif name in request.query_params:
            try:
                kwargs[name] = _convert(request.query_params[name], param.annotation)
            except ValueError:
                raise ValueError(f"query parameter {name!r} is not a {param.annotation}") from None
        elif param.default is param.empty:
            raise ValueError(f"missing parameter {name!r}")
    return kwargs


def _tail(request: Request, prefix: str) -> str:
    """The path after the mount point (Starlette keeps the whole path in `url.path`)."""
    path = request.url.path
    return path[len(prefix) :] if path.startswith(prefix) else path.lstrip("/")


def _convert(value: str, annotation: Any) -> Any:
    """A query value as the parameter's annotation asks (int, float, bool), else the text."""
    if annotation in (int, "int"):
        return int(value)
    if annotation in (float, "float"):
        return float(value)
    if annotation in (bool, "bool"):
        return value.lower() in ("1", "true", "yes", "on")
    return value
