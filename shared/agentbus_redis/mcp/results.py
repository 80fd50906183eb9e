"""An MCP ``tools/call`` result as a tool_result (pure: the result as JSON in, a ToolOutput out).

Content blocks map as Claude Code maps them: ``text`` → text; ``image`` → an image block (base64 source);
an embedded ``resource`` → its text prefixed with where it came from, or an image when it is an image blob,
else a note; ``resource_link`` → a line naming it; ``audio`` → a note. ``structuredContent`` becomes JSON text
when the server sent no text beside it. Output past ``max_chars`` (text characters plus base64 image
characters) is cut with a note saying so. ``isError`` makes an error result with the server's text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import ContentBlock, ImageBlock, TextBlock
from agentbus_redis.tools.tool import ToolOutput

DEFAULT_MAX_OUTPUT_CHARS = 100_000
"""About Claude Code's default MCP output limit (25,000 tokens) in characters."""
_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")


@dataclass(frozen=True, slots=True)
class McpProgress:
    """One ``notifications/progress`` of a running call."""

    progress: float
    total: float | None = None
    message: str | None = None


def mcp_progress_data(server: str, tool: str, progress: McpProgress) -> JsonObject:
    """The ``data`` of the progress message (Claude Code's ``mcp_progress``)."""
    data: JsonObject = {
        "type": "mcp_progress",
        "status": "progress",
        "serverName": server,
        "toolName": tool,
        "progress": progress.progress,
    }
    if progress.total is not None:
        data["total"] = progress.total
    if progress.message is not None:
        data["progressMessage"] = progress.message
    return data


def _text(value: JsonValue) -> str:
    return value if isinstance(value, str) else ""


def _block(item: JsonObject, server: str) -> ContentBlock:
    kind = item.get("type")
    if kind == "text":
        return TextBlock(text=_text(item.get("text")))
    if kind == "image" and _text(item.get("mimeType")) in _IMAGE_TYPES:
        source = {"type": "base64", "media_type": _text(item.get("mimeType")), "data": _text(item.get("data"))}
        return ImageBlock(source=source)
    if kind == "resource":
        resource = item.get("resource")
        resource = resource if isinstance(resource, dict) else {}
        uri = _text(resource.get("uri"))
        prefix = f"[Resource from {server} at {uri}] "
        if isinstance(resource.get("text"), str):
            return TextBlock(text=prefix + _text(resource.get("text")))
        mime = _text(resource.get("mimeType"))
        if mime in _IMAGE_TYPES and isinstance(resource.get("blob"), str):
            return ImageBlock(source={"type": "base64", "media_type": mime, "data": _text(resource.get("blob"))})
        return TextBlock(text=f"{prefix}(binary content, {mime or 'unknown type'}, not shown)")
    if kind == "resource_link":
        described = f" ({_text(item.get('description'))})" if item.get("description") else ""
        return TextBlock(text=f"[Resource link: {_text(item.get('name'))}] {_text(item.get('uri'))}{described}")
    if kind == "audio":
        return TextBlock(text=f"[Audio from {server}: {_text(item.get('mimeType')) or 'unknown type'}, not shown]")
    return TextBlock(text=f"[Unsupported content from {server}: {kind!r}]")


def _size(block: ContentBlock) -> int:
    if isinstance(block, TextBlock):
        return len(block.text)
    if isinstance(block, ImageBlock):
        return len(_text(block.source.get("data")))
    return 0


def truncation_note(limit: int, total: int) -> str:
    return (
        f"\n\n[OUTPUT TRUNCATED - the MCP tool returned {total} characters, over the {limit}-character limit; "
        "ask for less (a narrower query or a page) to see the rest]"
    )


def _limit(blocks: list[ContentBlock], max_chars: int) -> list[ContentBlock]:
    total = sum(_size(block) for block in blocks)
    if total <= max_chars:
        return blocks
    kept: list[ContentBlock] = []
    room = max_chars
    for block in blocks:
        size = _size(block)
        if size <= room:
            kept.append(block)
            room -= size
        elif isinstance(block, TextBlock) and room > 0:
            kept.append(TextBlock(text=block.text[:room]))
            room = 0
    note = truncation_note(max_chars, total)
    if kept and isinstance(kept[-1], TextBlock):
        kept[-1] = TextBlock(text=kept[-1].text + note)
    else:
        kept.append(TextBlock(text=note.lstrip("\n")))
    return kept


def mcp_tool_output(result: JsonObject, *, server: str, max_chars: int = DEFAULT_MAX_OUTPUT_CHARS) -> ToolOutput:
    """The tool_result of a ``CallToolResult`` (as its JSON, camelCase keys); see the module docstring."""
    raw = result.get("content")
    items = [item for item in raw if isinstance(item, dict)] if isinstance(raw, list) else []
    blocks = [_block(item, server) for item in items]
    structured = result.get("structuredContent")
    if structured is not None and not any(isinstance(block, TextBlock) for block in blocks):
        blocks.append(TextBlock(text=json.dumps(structured, ensure_ascii=False)))
    blocks = _limit(blocks, max_chars)
    if result.get("isError") is True:
        text = "\n".join(block.text for block in blocks if isinstance(block, TextBlock)) or "(no error text)"
        return ToolOutput(text, is_error=True, tool_use_result=f"Error: {text}", error_type="tool_error")
    if not blocks:
        blocks = [TextBlock(text="(no content)")]
    if all(isinstance(block, TextBlock) for block in blocks) and len(blocks) == 1:
        only = blocks[0]
        assert isinstance(only, TextBlock)
        return ToolOutput(only.text, tool_use_result=[only.to_wire()])
    return ToolOutput(list(blocks), tool_use_result=[block.to_wire() for block in blocks])
