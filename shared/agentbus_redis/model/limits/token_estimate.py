"""A rough token count of a request, for the pre-flight blocking limit (agent-loop.md M8.1).

Claude Code's rough estimation: a string is ``round(len / 4)`` tokens; per content block, ``text`` its text,
``thinking`` its thinking, ``redacted_thinking`` its data, ``tool_use`` its name plus its input as JSON,
``tool_result`` its content (a string or blocks, counted the same way), ``image`` and ``document`` a flat
2 000; any other block its JSON. Claude Code adds this count for the messages after the last API response
to that response's usage; the worker does not keep the previous response's usage with the request, so it
counts the whole prompt this way: the messages, the ``system`` text and the tool definitions (as JSON).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

from agentbus_redis.json_types import JsonValue

BYTES_PER_TOKEN: Final = 4
MEDIA_TOKENS: Final = 2_000
"""An image or a document, whatever its size (Claude Code's conservative flat estimate)."""


def rough_tokens(text: str) -> int:
    """``round(len(text) / 4)`` (JavaScript's ``Math.round``: halves round up)."""
    return (2 * len(text) + BYTES_PER_TOKEN) // (2 * BYTES_PER_TOKEN)


def _json(value: JsonValue) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def content_tokens(content: JsonValue) -> int:
    """A message's ``content``: a string, or a list of blocks."""
    if isinstance(content, str):
        return rough_tokens(content)
    if isinstance(content, list):
        return sum(block_tokens(block) for block in content)
    return 0


def block_tokens(block: JsonValue) -> int:
    if isinstance(block, str):
        return rough_tokens(block)
    if not isinstance(block, Mapping):
        return 0
    kind = block.get("type")
    if kind == "text":
        return rough_tokens(str(block.get("text") or ""))
    if kind in ("image", "document"):
        return MEDIA_TOKENS
    if kind == "tool_result":
        return content_tokens(block.get("content"))
    if kind == "tool_use":
        tool_input = block.get("input")
        return rough_tokens(str(block.get("name") or "") + _json(tool_input if tool_input is not None else {}))
    if kind == "thinking":
        return rough_tokens(str(block.get("thinking") or ""))
    if kind == "redacted_thinking":
        return rough_tokens(str(block.get("data") or ""))
    return rough_tokens(_json(dict(block)))


def estimate_prompt_tokens(body: Mapping[str, JsonValue]) -> int:
    """M8.1: the rough token count of a Messages API request body (messages, system, tools)."""
    messages = body.get("messages")
    total = (
        sum(content_tokens(message.get("content")) for message in messages or [] if isinstance(message, Mapping))
        if isinstance(messages, list)
        else 0
    )
    total += content_tokens(body.get("system"))
    tools = body.get("tools")
    if isinstance(tools, list) and tools:
        total += rough_tokens(_json(tools))
    return total


__all__ = ["MEDIA_TOKENS", "block_tokens", "content_tokens", "estimate_prompt_tokens", "rough_tokens"]
