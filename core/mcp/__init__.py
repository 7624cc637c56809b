"""MCP, the Model Context Protocol: servers as tool sources (`McpManager`, one `McpConnection` per server, their
tools in the app's tool registry owned by `mcp:<server>`), hookchat's own tools served over MCP
(`hookchat mcp serve`), and Agent Skills beside them (`SkillCatalog`). See docs/mcp.md and docs/skills.md.

    manager = McpManager(config, app.plugins.tools)   # the app builds it from [mcp]
    await manager.start()
    print(manager.status())
    await manager.aclose()
"""

from typing import TYPE_CHECKING

from core.mcp._errors import McpConfigError
from core.mcp._manager import McpManager, read_servers_file
from core.utils.lazy import lazy_names

# The names below need the MCP SDK (and starlette, for serving): they are imported on first use (PEP 562), so
# `import core.app` and a plugin's tests do not load the SDK unless a server is configured or tools are served.
# So are the Agent Skills' names, which only the `skills` plugin (loaded when the skills folder exists) and the web
# console use (their module is 0.5% of a `hookchat plugins`, docs/performance.md).
_LAZY = {
    **dict.fromkeys(
        ("SKILL_FILE", "Skill", "SkillCatalog", "SkillError", "SkillFileTool", "parse_skill"), "core.mcp._skills"
    ),
    **dict.fromkeys(
        (
            "MAX_DESCRIPTION",
            "MAX_SCHEMA_BYTES",
            "MAX_TOOLS",
            "OWNER_PREFIX",
            "McpConnection",
            "McpTool",
            "ServerState",
            "ToolListing",
            "expand_env",
        ),
        "core.mcp._connection",
    ),
    **dict.fromkeys(("LOOPBACK_HOSTS", "McpHttpListener", "McpServeError", "McpToolServer"), "core.mcp._serve"),
    **dict.fromkeys(("MAX_MEDIA_BASE64", "MAX_RESULT_CHARS", "to_tool_result"), "core.mcp._results"),
}


if TYPE_CHECKING:  # what the checker sees of the lazy names (the same modules as `_LAZY` names)
    from core.mcp._connection import (
        MAX_DESCRIPTION,
        MAX_SCHEMA_BYTES,
        MAX_TOOLS,
        OWNER_PREFIX,
        McpConnection,
        McpTool,
        ServerState,
        ToolListing,
        expand_env,
    )
    from core.mcp._results import MAX_MEDIA_BASE64, MAX_RESULT_CHARS, to_tool_result
    from core.mcp._serve import LOOPBACK_HOSTS, McpHttpListener, McpServeError, McpToolServer
    from core.mcp._skills import SKILL_FILE, Skill, SkillCatalog, SkillError, SkillFileTool, parse_skill


__getattr__ = lazy_names(__name__, _LAZY)


__all__ = [
    "LOOPBACK_HOSTS",
    "McpHttpListener",
    "McpServeError",
    "McpToolServer",
    "SKILL_FILE",
    "Skill",
    "SkillCatalog",
    "SkillError",
    "SkillFileTool",
    "parse_skill",
    "MAX_DESCRIPTION",
    "MAX_MEDIA_BASE64",
    "MAX_RESULT_CHARS",
    "MAX_SCHEMA_BYTES",
    "MAX_TOOLS",
    "OWNER_PREFIX",
    "McpConfigError",
    "McpConnection",
    "McpManager",
    "McpTool",
    "ServerState",
    "ToolListing",
    "expand_env",
    "read_servers_file",
    "to_tool_result",
]
