"""Prompt-cache breakpoints as Claude Code places them (agent-loop.md M9.4, M9.5, M9.9).

* system: the CLI-prefix block and the rest block each get a marker (≤ 2);
* messages: exactly one marker, on the last content block of the last message (second-to-last with
  ``skip_cache_write``, M9.4 fire-and-forget forks); string content becomes one text block first; an
  assistant message ending in ``thinking``/``redacted_thinking`` gets none;
* tools: Claude Code places none (M9.4); markers a tool definition carries itself are kept while the
  request stays within the API's 4 breakpoints (M9.1), the last ones first (a marker on a later tool
  caches the earlier ones too).

Markers already on message blocks are removed: the one message marker is ours (a stale marker on an
earlier message would be a fourth breakpoint that nothing resumes from). Nothing is mutated; changed
messages, blocks and tools are copies, everything else is shared with the input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final, Literal, TypeAlias

from agentbus_redis.api.request_view import THINKING_TYPES
from agentbus_redis.json_types import JsonObject, JsonValue

CacheTtl: TypeAlias = Literal["5m", "1h"]

MAX_CACHE_BREAKPOINTS: Final = 4
"""M9.1: the API rejects a fifth ``cache_control`` (anthropic-api-rules.md)."""


def cache_control(ttl: CacheTtl = "5m") -> JsonObject:
    """M9.5: ``{"type": "ephemeral"}``, plus ``"ttl": "1h"`` only for the one-hour cache (5 minutes is the
    API default and is sent without ``ttl``)."""
    return {"type": "ephemeral", "ttl": "1h"} if ttl == "1h" else {"type": "ephemeral"}


def _without_cache_control(block: JsonValue) -> JsonValue:
    """``block`` without its own ``cache_control`` and without those of a tool_result's nested blocks."""
    if not isinstance(block, dict):
        return block
    copy = {key: value for key, value in block.items() if key != "cache_control"}
    nested = copy.get("content")
    if block.get("type") == "tool_result" and isinstance(nested, list):
        copy["content"] = [_without_cache_control(item) for item in nested]
    return copy


def _has_cache_control(block: JsonValue) -> bool:
    # ``dict``, not ``Mapping``: this runs for every block of every request, and an ABC check is slow.
    if not isinstance(block, dict):
        return False
    if "cache_control" in block:
        return True
    nested = block.get("content")
    return block.get("type") == "tool_result" and isinstance(nested, list) and any(map(_has_cache_control, nested))


def _clean_message(message: JsonValue) -> JsonValue:
    """``message`` without message-level markers (the same object when it has none)."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or not isinstance(content, list) or not any(map(_has_cache_control, content)):
        return message
    return {**message, "content": [_without_cache_control(block) for block in content]}


def _marked_message(message: JsonValue, marker: JsonObject) -> JsonValue:
    """M9.4: ``message`` with the marker on its last content block (``message`` itself when that block
    cannot carry one: thinking, or empty text the API refuses to cache)."""
    if not isinstance(message, Mapping):
        return message
    content = message.get("content")
    if isinstance(content, str):
        if not content:
            return message
        return {**message, "content": [{"type": "text", "text": content, "cache_control": dict(marker)}]}
    if not isinstance(content, list) or not content:
        return message
    last = content[-1]
    if not isinstance(last, Mapping) or last.get("type") in THINKING_TYPES:
        return message
    if last.get("type") == "text" and not last.get("text"):
        return message
    return {**message, "content": [*content[:-1], {**last, "cache_control": dict(marker)}]}


def count_cache_breakpoints(params: Mapping[str, JsonValue]) -> int:
    """Every ``cache_control`` in a request's tools, system blocks and messages (nested tool_result
    blocks included)."""
    count = 0
    for key in ("tools", "system"):
        items = params.get(key)
        if isinstance(items, list):
            count += sum(1 for item in items if isinstance(item, Mapping) and "cache_control" in item)
    messages = params.get("messages")
    if isinstance(messages, list):
        for message in messages:
            content = message.get("content") if isinstance(message, Mapping) else None
            if isinstance(content, list):
                count += sum(_count_block(block) for block in content)
    return count


def _count_block(block: JsonValue) -> int:
    if not isinstance(block, Mapping):
        return 0
    nested = block.get("content")
    inner = (
        sum(_count_block(item) for item in nested)
        if block.get("type") == "tool_result" and isinstance(nested, list)
        else 0
    )
    return inner + (1 if "cache_control" in block else 0)


def mark_system(blocks: Sequence[JsonObject], ttl: CacheTtl = "5m") -> list[JsonObject]:
    """M9.4: every system block (the prefix block and the rest block) gets a marker."""
    return [{**block, "cache_control": cache_control(ttl)} for block in blocks]


def mark_messages(
    messages: Sequence[JsonValue], ttl: CacheTtl = "5m", *, skip_cache_write: bool = False
) -> list[JsonValue]:
    """M9.4: exactly one message marker, on the last message (second-to-last with ``skip_cache_write``);
    any other message-level marker is removed."""
    cleaned = [_clean_message(message) for message in messages]
    index = len(cleaned) - (2 if skip_cache_write else 1)
    if index >= 0:
        cleaned[index] = _marked_message(cleaned[index], cache_control(ttl))
    return cleaned


def fit_tool_markers(tools: Sequence[JsonObject], budget: int) -> list[JsonObject]:
    """Keep at most ``budget`` of the tools' own markers, the last ones (M9.1's limit of 4, M9.9)."""
    marked = [index for index, tool in enumerate(tools) if "cache_control" in tool]
    dropped = set(marked[: max(0, len(marked) - max(0, budget))])
    return [
        {key: value for key, value in tool.items() if key != "cache_control"} if index in dropped else tool
        for index, tool in enumerate(tools)
    ]


def apply_cache_breakpoints(
    params: Mapping[str, JsonValue], *, ttl: CacheTtl = "5m", enabled: bool = True, skip_cache_write: bool = False
) -> JsonObject:
    """M9.4/M9.9: a copy of request ``params`` with Claude Code's breakpoints; never more than 4 in all.

    ``enabled=False`` (M9.6 ``DISABLE_PROMPT_CACHING``) places none and still removes stale message
    markers and keeps the tools' own within the limit."""
    result: JsonObject = dict(params)
    used = 0
    system = params.get("system")
    if isinstance(system, list):
        blocks = [block for block in system if isinstance(block, dict)]
        marked = mark_system(blocks, ttl) if enabled else blocks
        result["system"] = list(marked)
        used += sum(1 for block in marked if "cache_control" in block)
    messages = params.get("messages")
    if isinstance(messages, list):
        if enabled:
            marked_messages = mark_messages(messages, ttl, skip_cache_write=skip_cache_write)
        else:
            marked_messages = [_clean_message(message) for message in messages]
        result["messages"] = marked_messages
        # Every other message was cleaned: the one marker sits on the last or second-to-last message.
        used += count_cache_breakpoints({"messages": marked_messages[-2:]})
    tools = params.get("tools")
    if isinstance(tools, list):
        tool_objects = [tool for tool in tools if isinstance(tool, dict)]
        result["tools"] = list(fit_tool_markers(tool_objects, MAX_CACHE_BREAKPOINTS - used))
    return result


__all__ = [
    "MAX_CACHE_BREAKPOINTS",
    "CacheTtl",
    "apply_cache_breakpoints",
    "cache_control",
    "count_cache_breakpoints",
    "fit_tool_markers",
    "mark_messages",
    "mark_system",
]
