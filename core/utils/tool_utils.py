"""Tools the model can call: `BaseTool`, the `FunctionTool` that wraps `@register.tool` methods and handlers, and
`ToolSet`, the set of tools one request offers. Every tool, however it was registered, obeys the same rules:
a name matching `[A-Za-z0-9_.\\-]{1,64}`, a JSON Schema for its arguments, and a timeout of at most 300 s."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import re
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import anyio

from core.utils.json_schema import schema_hazard
from core.utils.log import logger as _log
from core.utils.tasks import call_handler

__all__ = [
    "BaseTool",
    "FunctionTool",
    "ToolCall",
    "ToolSet",
    "ToolDefinitionError",
    "validate_tool_rules",
    "MAX_TOOL_TIMEOUT",
]

TOOL_NAME_RE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
MAX_TOOL_TIMEOUT = 300.0
DEFAULT_TOOL_TIMEOUT = 30.0
EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "required": []}


class ToolDefinitionError(ValueError):
    """A tool breaks the rules (bad name, bad timeout, bad schema); the message says which rule and how to fix it."""


def validate_tool_rules(name: object, timeout: object, parameters: Any, *, where: str = "") -> None:
    """Check the rules every tool follows; raise `ToolDefinitionError` naming the tool (and `where` it came from).
    Any value is checked (a remote registration's are the caller's JSON)."""
    origin = f" (registered by {where})" if where else ""
    if not isinstance(name, str) or not TOOL_NAME_RE.fullmatch(name):
        raise ToolDefinitionError(
            f"tool name {name!r}{origin} is invalid: use 1 to 64 characters from A-Z a-z 0-9 _ . -"
        )
    if not isinstance(timeout, int | float) or not 0 < timeout <= MAX_TOOL_TIMEOUT:
        raise ToolDefinitionError(
            f"tool {name!r}{origin}: timeout {timeout!r} must be a number of seconds above 0 and at most 300"
        )
    if not isinstance(parameters, dict) or parameters.get("type", "object") != "object":
        raise ToolDefinitionError(
            f"tool {name!r}{origin}: parameters must be a JSON Schema object ({{'type': 'object'}})"
        )
    problem = _schema_problem(json.dumps(parameters, sort_keys=True, default=repr))
    if problem:
        raise ToolDefinitionError(f"tool {name!r}{origin}: parameters are not a valid JSON Schema: {problem}")
    hazard = schema_hazard(parameters)
    if hazard:
        raise ToolDefinitionError(f"tool {name!r}{origin}: parameters refused: {hazard}")


@functools.lru_cache(maxsize=4096)
def _schema_problem(schema_json: str) -> str:
    """Why a schema (as canonical JSON) is not a valid JSON Schema, or ""; cached, since checking costs ~1 ms.
    jsonschema is imported here, by the first tool registered: loading plugins without tools needs none of it."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(json.loads(schema_json))
    except SchemaError as exc:
        return exc.message
    return ""


@dataclass(slots=True)
class ToolCall:
    """One tool call the model asked for. `arguments` is parsed; `raw_arguments` is the text the model wrote."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: f"call_{uuid.uuid4().hex[:16]}")
    raw_arguments: str | None = None

    def __post_init__(self) -> None:
        if self.raw_arguments is None:
            self.raw_arguments = json.dumps(self.arguments, ensure_ascii=False)

    def to_openai(self) -> dict[str, Any]:
        """The call in OpenAI chat format (an assistant message's `tool_calls` item)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.raw_arguments}}


def execute_takes_event(tool: BaseTool) -> bool:
    """Whether `tool.execute` takes the event first, as KiraAI calls it (`execute(event, **args)`), rather than the
    model's arguments alone (seed 003's `execute(self, query)`). Its signature decides: a first positional
    parameter that is not one of the schema's properties (`event`), or `*args`, means the event."""
    params = list(inspect.signature(tool.execute).parameters.values())
    properties = (tool.parameters or {}).get("properties") or {}
    for param in params:
        if param.kind is inspect.Parameter.VAR_POSITIONAL:
            return True
        if param.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD):
            return param.name not in properties
        return False
    return False


class BaseTool:
    """A tool as a class: set `name`, `description`, `parameters` (JSON Schema) and implement `async execute`.

    Add it to one request with `req.tool_set.add(MyTool(ctx=self.ctx))` (or the class itself) in an `llm_request`
    hook. `timeout` (seconds, at most 300) bounds each call; `role` scopes it to one persona (None: every persona).
    """

    name: str = ""
    description: str = ""
    parameters: dict[str, Any] = EMPTY_PARAMETERS
    timeout: float = DEFAULT_TOOL_TIMEOUT
    role: str | None = None
    #: True for a tool another process serves through the HTTP tool registry (seed 000).
    remote: bool = False

    def __init__(self, ctx: Any = None, **kwargs: Any) -> None:
        self.ctx = ctx
        for key, value in kwargs.items():
            setattr(self, key, value)
        validate_tool_rules(self.name, self.timeout, self.parameters, where=type(self).__qualname__)

    @property
    def owner(self) -> str | None:
        """The plugin id this tool belongs to, if it came from a plugin."""
        return getattr(self.ctx, "plugin_id", None)

    async def execute(self, *args: Any, **params: Any) -> Any:
        """Run the tool with the model's (validated) arguments; return a str, a `ToolResult` or JSON data. A tool
        written for KiraAI takes the event first (`execute(self, event, **params)`)."""
        raise NotImplementedError(f"tool {self.name!r} does not implement execute()")

    async def invoke(self, event: Any, arguments: dict[str, Any]) -> Any:
        """How the agent loop calls the tool: `execute(**arguments)` (seed 003's `execute(self, query)`), or
        `execute(event, **arguments)` when `execute` is written for KiraAI (see `execute_takes_event`)."""
        if execute_takes_event(self):
            return await self.execute(event, **arguments)
        return await self.execute(**arguments)

    def to_openai(self) -> dict[str, Any]:
        """The tool in the OpenAI tools format."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class FunctionTool(BaseTool):
    """A tool backed by a function: `@register.tool` methods (called `(event, **params)`) and imperative handlers.

    `pass_event=False` calls the handler with the arguments only (the seed 000 / 002 style `async def f(*, city)`).
    Sync handlers are run in a worker thread so they cannot block the event loop.
    """

    def __init__(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any] | None,
        handler: Callable[..., Awaitable[Any] | Any],
        *,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        role: str | None = None,
        ctx: Any = None,
        pass_event: bool = True,
        remote: bool = False,
    ) -> None:
        self.name = name
        self.description = description
        self.parameters = parameters if parameters is not None else dict(EMPTY_PARAMETERS)
        self.handler = handler
        self.timeout = timeout
        self.role = role
        self.pass_event = pass_event
        self.remote = remote
        super().__init__(ctx=ctx)

    async def invoke(self, event: Any, arguments: dict[str, Any]) -> Any:
        """Call the handler with the event (unless `pass_event=False`) and the arguments as keywords; a sync
        handler runs in a worker thread."""
        args = (event,) if self.pass_event else ()
        try:
            return await call_handler(self.handler, *args, **arguments)
        except anyio.get_cancelled_exc_class():
            if not inspect.iscoroutinefunction(self.handler):
                _log.warning(
                    "tool %r (plugin %r): abandoned at its deadline; its synchronous handler still runs in "
                    "a worker thread until it returns, and its result will be dropped",
                    self.name,
                    self.owner,
                )
            raise

    async def execute(self, **params: Any) -> Any:
        """Call the handler without an event (for use outside a turn)."""
        return await self.invoke(None, params)


#: The numbers `ToolSet.version` takes: each change of any set takes the next one.
_versions = itertools.count(1)


class ToolSet:
    """The tools offered to the model in one request: add, remove, get, `in`, iterate, export to OpenAI format.

    `version` is a number that changes whenever the set changes (`add`, `remove`, `clear`), and no two sets share
    one: a reader that saw a set at a version knows it has not changed while the number stays (a trace compares
    it after each `llm_request` hook rather than the tools' names).
    """

    def __init__(self, tools: list[BaseTool] | None = None) -> None:
        self._tools: dict[str, BaseTool] = {}
        self.version = next(_versions)
        for tool in tools or ():
            self.add(tool)

    def add(self, tool: BaseTool | type[BaseTool]) -> BaseTool:
        """Add a tool instance, or a `BaseTool` subclass (instantiated without ctx). A tool of the same name is
        replaced, so a per-request tool overrides a global one."""
        if isinstance(tool, type):
            if not issubclass(tool, BaseTool):
                raise ToolDefinitionError(f"{tool!r} is not a BaseTool subclass")
            tool = tool()
        if not isinstance(tool, BaseTool):
            raise ToolDefinitionError(f"{tool!r} is not a BaseTool instance")
        self._tools[tool.name] = tool
        self.version = next(_versions)
        return tool

    def remove(self, name: str) -> BaseTool | None:
        """Remove the tool called `name`; returns it, or None when there was none."""
        self.version = next(_versions)
        return self._tools.pop(name, None)

    def get(self, name: str) -> BaseTool | None:
        """The tool called `name`, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """The tool names, in insertion order."""
        return list(self._tools)

    def copy(self) -> ToolSet:
        """A shallow copy (the same tool objects)."""
        out = ToolSet()
        out._tools = dict(self._tools)  # a new set: `version` is its own already
        return out

    def clear(self) -> None:
        """Remove every tool."""
        self.version = next(_versions)
        self._tools.clear()

    def to_openai(self) -> list[dict[str, Any]]:
        """Every tool in the OpenAI tools format."""
        return [t.to_openai() for t in self._tools.values()]

    def __contains__(self, item: object) -> bool:
        if isinstance(item, BaseTool):
            return self._tools.get(item.name) is item
        return item in self._tools

    def __iter__(self) -> Iterator[BaseTool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def __bool__(self) -> bool:
        return bool(self._tools)

    def __repr__(self) -> str:
        return f"ToolSet({list(self._tools)})"
