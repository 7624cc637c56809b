"""The MCP error every part of core.mcp raises for a configuration it cannot use; a module of its own, free of the
MCP SDK, so the app can name it without importing the SDK."""

from __future__ import annotations

__all__ = ["McpConfigError"]


class McpConfigError(ValueError):
    """An MCP server's configuration cannot be used (a `${VAR}` that is not set, a broken servers file); the message
    names the server, the key and the fix."""
