"""The HTTP API of the tool registry (seed 000), as a Starlette app: register, unregister, clear and list remote
tools. Every `/api/tools` route needs the bearer token; bodies are JSON objects of at most `max_body_bytes`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from core.server._http import HTTPProblem, check_bearer, problem_response, read_json_body
from core.server.registry import RegistrationError, RemoteToolRegistry
from core.utils.tool_utils import ToolDefinitionError

__all__ = ["build_registry_app"]


def _optional_str(body: dict[str, Any], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise HTTPProblem(400, f"{key} must be a string or null")
    return value


def build_registry_app(
    registry: RemoteToolRegistry, *, token: Callable[[], str | None], max_body_bytes: int
) -> Starlette:
    """The registry's ASGI app. `token()` is the configured bearer token (None: registration refused, 403)."""

    async def guarded(request: Request, handle: Callable[[Any], Any], *, body: bool = True) -> JSONResponse:
        try:
            check_bearer(request, token(), what="the tool registry")
            payload = await read_json_body(request, max_body_bytes) if body else None
            if body and not isinstance(payload, dict):
                raise HTTPProblem(400, "the body must be a JSON object")
            return JSONResponse(await handle(payload))
        except HTTPProblem as problem:
            return problem_response(problem)
        except (RegistrationError, ToolDefinitionError) as exc:
            return problem_response(HTTPProblem(400, str(exc)))
        except (ValueError, TypeError, RecursionError, UnicodeError) as exc:
            # Whatever else a body can break is the body's fault: a 400 with the reason, never a 500.
            return problem_response(HTTPProblem(400, f"malformed request body: {type(exc).__name__}"))

    async def register(request: Request) -> JSONResponse:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            spec = await registry.register(body)
            return {"ok": True, "tool": spec.describe(), "boot_id": registry.boot_id}

        return await guarded(request, handle)

    async def unregister(request: Request) -> JSONResponse:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            name = body.get("name")
            if not isinstance(name, str) or not name:
                raise HTTPProblem(400, "name (the tool's name) is required")
            removed = await registry.unregister(name, _optional_str(body, "source"), _optional_str(body, "role"))
            return {"ok": True, "removed": removed}

        return await guarded(request, handle)

    async def clear(request: Request) -> JSONResponse:
        async def handle(body: dict[str, Any]) -> dict[str, Any]:
            source = body.get("source")
            if not isinstance(source, str) or not source:
                raise HTTPProblem(400, "source is required (clear removes one source's tools)")
            removed = await registry.clear(source, _optional_str(body, "role"))
            return {"ok": True, "removed": removed}

        return await guarded(request, handle)

    async def list_tools(request: Request) -> JSONResponse:
        async def handle(_: Any) -> dict[str, Any]:
            source = request.query_params.get("source") or None
            local = []
            if source is None or source.startswith("plugin:"):
                for name in sorted({t.name for t in registry.tools.active()}):
                    tool = registry.tools.get(name)
                    owner = registry.tools.owner_of(name) or ""
                    if tool is None or tool.remote:
                        continue
                    if source is not None and source != f"plugin:{owner}":
                        continue
                    local.append(
                        {
                            "name": tool.name,
                            "description": tool.description,
                            "parameters": tool.parameters,
                            "role": tool.role,
                            "source": f"plugin:{owner}",
                            "timeout_seconds": tool.timeout,
                            "available": True,
                            "remote": False,
                        }
                    )
            return {"ok": True, "boot_id": registry.boot_id, "tools": registry.list(source) + local}

        return await guarded(request, handle, body=False)

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"ok": True, "boot_id": registry.boot_id})

    return Starlette(
        routes=[
            Route("/api/tools/register", register, methods=["POST"]),
            Route("/api/tools/unregister", unregister, methods=["POST"]),
            Route("/api/tools/clear", clear, methods=["POST"]),
            Route("/api/tools", list_tools, methods=["GET"]),
            Route("/api/health", health, methods=["GET"]),
        ]
    )
