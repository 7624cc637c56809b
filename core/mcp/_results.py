"""What an MCP tool call answered, as the `ToolResult` the model and the `tool_result` hooks see: text blocks and
embedded text resources as text, images and audio as attachments (within the media budget), `isError` as a tool
error, structured content as JSON when there is no text; everything bounded in size.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types as types

from core.chat.message_elements import BaseMessageElement, Image, Record
from core.provider import ToolResult

__all__ = ["to_tool_result", "MAX_RESULT_CHARS", "MAX_MEDIA_BASE64"]

#: Characters of text one MCP result may give the model; the rest is cut with a note (it stays in no history).
MAX_RESULT_CHARS = 100_000
#: Largest image or audio block kept as an attachment, in characters of base64 (a picture is then fitted to the
#: delivery budget by the agent loop, as any tool's picture).
MAX_MEDIA_BASE64 = 2 * 1024 * 1024


def _media(block: types.ImageContent | types.AudioContent, index: int, notes: list[str]) -> Image | Record | None:
    kind = "picture" if isinstance(block, types.ImageContent) else "audio"
    if len(block.data) > MAX_MEDIA_BASE64:
        notes.append(
            f"[note: {kind} {index + 1} ({len(block.data) // 1024} KiB of base64) was dropped: over the "
            f"{MAX_MEDIA_BASE64 // 1024} KiB an MCP tool may return]"
        )
        return None
    extension = block.mime_type.partition("/")[2].split(";")[0].strip() or "bin"
    name = f"mcp_{kind}_{index + 1}.{extension}"
    if isinstance(block, types.ImageContent):
        return Image(base64=block.data, mime=block.mime_type, name=name)
    return Record(base64=block.data, mime=block.mime_type, name=name)


def _resource_text(resource: types.TextResourceContents | types.BlobResourceContents) -> str:
    if isinstance(resource, types.TextResourceContents):
        return f"[resource {resource.uri}]\n{resource.text}"
    mime = resource.mime_type or "application/octet-stream"
    return f"[resource {resource.uri}: {mime}, {len(resource.blob) * 3 // 4} bytes of binary data, not shown]"


def to_tool_result(result: types.CallToolResult) -> ToolResult:
    """Turn a `CallToolResult` into a `ToolResult` (see the module docstring); `is_error` follows `isError`."""
    texts: list[str] = []
    attachments: list[BaseMessageElement] = []
    notes: list[str] = []
    for index, block in enumerate(result.content):
        if isinstance(block, types.TextContent):
            texts.append(block.text)
        elif isinstance(block, types.ImageContent | types.AudioContent):
            element = _media(block, index, notes)
            if element is not None:
                attachments.append(element)
                texts.append(f"[{element.name} attached: send it with <file>{element.name}</file>]")
        elif isinstance(block, types.EmbeddedResource):
            texts.append(_resource_text(block.resource))
        elif isinstance(block, types.ResourceLink):
            texts.append(f"[resource link {block.uri}" + (f": {block.name}" if block.name else "") + "]")
    if not texts and result.structured_content is not None:
        texts.append(_json(result.structured_content))
    text = "\n".join(texts)
    if len(text) > MAX_RESULT_CHARS:
        text = (
            text[:MAX_RESULT_CHARS] + f"\n[cut: the result was {len(text)} characters; the first "
            f"{MAX_RESULT_CHARS} are shown]"
        )
    if notes:
        text = "\n".join([text, *notes]) if text else "\n".join(notes)
    if result.is_error:
        text = f"error: {text}" if text else "error: the MCP tool failed without saying why"
    return ToolResult(text=text, attachments=attachments, is_error=bool(result.is_error))


def _json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)
