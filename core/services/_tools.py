"""The one code path by which a plugin's tool enters the tool registry, whether declared with `@register.tool`,
`@llm_tool` or added with `register_llm_tool`; plus the per-role view of the registry the agent loop offers.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any

from core.services._host import PluginHandle
from core.services._result import SdkError
from core.utils.log import logger
from core.utils.registry import OwnedRegistry
from core.utils.tool_utils import (
    EMPTY_PARAMETERS,
    BaseTool,
    FunctionTool,
    ToolCall,
    ToolDefinitionError,
    validate_tool_rules,
)

__all__ = [
    "add_function_tool",
    "refuse_if_stopping",
    "check_role",
    "remove_function_tool",
    "describe_tool",
    "plugin_tools",
    "visible_tools",
    "remote_owner",
    "current_tool_call",
    "REMOTE_OWNER_PREFIX",
]

REMOTE_OWNER_PREFIX = "remote:"
#: The longest persona name a tool may be scoped to (`role`).
MAX_ROLE_LENGTH = 64

#: The model's tool call being run in this task (set by the agent loop before it invokes a tool), so a remote
#: tool can forward the model's own `call_id` and `raw_arguments`. None outside a tool call.
current_tool_call: ContextVar[ToolCall | None] = ContextVar("hookchat_current_tool_call", default=None)


def remote_owner(source: str) -> str:
    """The registry owner of remote tools registered with `source`: `remote:<source>`."""
    return f"{REMOTE_OWNER_PREFIX}{source}"


def refuse_if_stopping(ctx: PluginHandle, what: str) -> None:
    """Raise `SdkError(code="plugin_stopped")` when the plugin of `ctx` is stopping (`ctx.closing`), so nothing it
    registers from `terminate()`, a timer or a task can outlive it. `what` names the refused registration."""
    if ctx.closing:
        raise SdkError(f"plugin {ctx.plugin_id!r} is stopping: it cannot register {what}", code="plugin_stopped")


def check_role(role: object, tool_name: object, where: str) -> None:
    """The role rule of every tool: None (global) or a persona name of 1 to 64 characters. Raises
    `ToolDefinitionError` naming the tool and who registered it."""
    if role is not None and (not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_LENGTH):
        raise ToolDefinitionError(
            f"tool {tool_name!r} (registered by {where}): role must be None (global) or a "
            f"persona name of 1 to {MAX_ROLE_LENGTH} characters, not {role!r}"
        )


def _tools_registry(ctx: PluginHandle) -> OwnedRegistry[BaseTool]:
    manager = ctx.manager
    if manager is None:
        raise SdkError(
            f"plugin {ctx.plugin_id!r} is not loaded by a plugin manager, so it cannot register tools",
            code="not_attached",
        )
    return manager.tools


def _check_handler_fits_schema(
    name: str, where: str, handler: Callable[..., Any], schema: dict[str, Any], pass_event: bool
) -> None:
    """Refuse a handler that could not take the arguments its JSON Schema lets the model send, at registration
    rather than at the model's first call: every schema property needs a parameter (or `**kwargs`), and every
    parameter without a default must be a property the schema requires (or the event)."""
    try:
        signature = inspect.signature(handler)
    except (TypeError, ValueError):  # no signature to read (a C callable): it will show at the first call
        return
    params = list(signature.parameters.values())
    if (
        pass_event
        and params
        and params[0].kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ):
        params = params[1:]  # the event
    properties = dict(schema.get("properties") or {})
    required = set(schema.get("required") or ())
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params)
    named = {
        p.name: p for p in params if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }
    fn = inspect.unwrap(handler)
    code = getattr(fn, "__code__", None)
    source = f" ({code.co_filename}:{code.co_firstlineno})" if code else ""
    shown = f"{getattr(fn, '__qualname__', name)}{signature}"
    head = f"tool {name!r} of {where}{source}: its function {shown} does not match its JSON Schema: "
    unknown = [prop for prop in properties if prop not in named and not takes_any]
    if unknown:
        raise ToolDefinitionError(
            head + f"the schema's propert{'ies' if len(unknown) > 1 else 'y'} {', '.join(map(repr, unknown))} "
            f"{'have' if len(unknown) > 1 else 'has'} no parameter; add "
            f"{', '.join(f'{u}=None' if u not in required else u for u in unknown)} to the function (keyword "
            "parameters after `*`, or **kwargs), or remove them from the schema"
        )
    unnamed = [p.name for p in named.values() if p.default is inspect.Parameter.empty and p.name not in properties]
    if unnamed:
        raise ToolDefinitionError(
            head + f'{", ".join(map(repr, unnamed))} {"are" if len(unnamed) > 1 else "is"} not in its "properties", '
            'so the model can never pass it: add it there (and to "required"), or give the parameter a default'
        )
    optional = [p.name for p in named.values() if p.default is inspect.Parameter.empty and p.name not in required]
    if optional:  # works while the model sends it; a warning, since many working plugins declare no "required"
        logger.warning(
            '%s%s %s not in its "required", so the model may leave it out and the call then fails: add '
            'it to "required" or give the parameter a default',
            head,
            ", ".join(map(repr, optional)),
            "are" if len(optional) > 1 else "is",
        )


def add_function_tool(
    ctx: PluginHandle,
    name: str,
    description: str,
    parameters: dict[str, Any] | None,
    handler: Callable[..., Awaitable[Any] | Any],
    *,
    timeout: float = 30.0,
    role: str | None = None,
    pass_event: bool = True,
) -> FunctionTool:
    """Check the tool rules, wrap `handler` in a `FunctionTool` and add it to the tool registry owned by the
    plugin of `ctx` (replacing that plugin's earlier tool of the same name). Raises `ToolDefinitionError`.

    `pass_event=True` calls `handler(event, **arguments)` (`@register.tool`); False calls `handler(**arguments)`
    (`@llm_tool` and `register_llm_tool`).
    """
    where = f"plugin {ctx.plugin_id!r}"
    refuse_if_stopping(ctx, f"tool {name!r}")
    schema = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
    validate_tool_rules(name, timeout, schema, where=where)
    check_role(role, name, where)
    if not callable(handler):
        raise ToolDefinitionError(f"tool {name!r} (registered by {where}): handler {handler!r} is not callable")
    _check_handler_fits_schema(name, where, handler, schema, pass_event)
    tool = FunctionTool(
        name, description, schema, handler, timeout=float(timeout), role=role, ctx=ctx, pass_event=pass_event
    )
    _tools_registry(ctx).add(name, tool, ctx.plugin_id)
    return tool


def remove_function_tool(ctx: PluginHandle, name: str) -> bool:
    """Remove the plugin's own tool `name` (another plugin's tool of that name stays); True when it had one."""
    return bool(_tools_registry(ctx).remove(name, ctx.plugin_id))


def describe_tool(tool: BaseTool, *, owner: str | None = None, active: bool = True) -> dict[str, Any]:
    """A tool as a JSON-ready dict: name, description, parameters, timeout, role, owner, remote, active."""
    return {
        "name": tool.name,
        "description": tool.description,
        "parameters": tool.parameters,
        "timeout": tool.timeout,
        "role": tool.role,
        "owner": owner if owner is not None else tool.owner,
        "remote": tool.remote,
        "active": active,
    }


def plugin_tools(ctx: PluginHandle) -> list[dict[str, Any]]:
    """Every tool the plugin of `ctx` registered, sorted by name; `active` is False for one shadowed by a newer
    tool of the same name from another owner."""
    registry = _tools_registry(ctx)
    own = registry.by_owner(ctx.plugin_id)
    return [
        describe_tool(tool, owner=ctx.plugin_id, active=registry.owner_of(name) == ctx.plugin_id)
        for name, tool in sorted(own.items())
    ]


def visible_tools(registry: OwnedRegistry[BaseTool], role: str | None) -> list[BaseTool]:
    """The tools a request for persona `role` offers: per name, the newest tool that is global or of that role,
    so a role-scoped tool never hides an older global tool of the same name from the other personas."""
    chosen: list[BaseTool] = []
    for _name, items in registry.layers():
        for tool in reversed(items):
            if tool.role is None or tool.role == role:
                chosen.append(tool)
                break
    return chosen
