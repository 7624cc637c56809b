"""MCP, the Model Context Protocol: servers as tool sources (`McpManager`, one `McpConnection` per server, their
tools in the app's tool registry owned by `mcp:<server>`), hookchat's own tools served over MCP
(`hookchat mcp serve`), and Agent Skills beside them (`SkillCatalog`). See docs/mcp.md and docs/skills.md.

    manager = McpManager(config, app.plugins.tools)   # the app builds it from [mcp]
    await manager.start()
    print(manager.status())
    await manager.aclose()
"""

from core.mcp._connection import (
    MAX_DESCRIPTION,
    MAX_SCHEMA_BYTES,
    MAX_TOOLS,
    OWNER_PREFIX,
    McpConfigError,
    McpConnection,
    McpTool,
    ServerState,
    ToolListing,
    expand_env,
)
from core.mcp._manager import McpManager, read_servers_file
from core.mcp._serve import LOOPBACK_HOSTS, McpHttpListener, McpServeError, McpToolServer
from core.mcp._skills import SKILL_FILE, Skill, SkillCatalog, SkillError, SkillFileTool, parse_skill
from core.mcp._results import MAX_MEDIA_BASE64, MAX_RESULT_CHARS, to_tool_result

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
