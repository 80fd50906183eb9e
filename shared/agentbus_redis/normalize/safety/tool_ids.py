"""Tool id rewriting of the API safety finalizer (anthropic-api-rules.md §1.11, §3.8): the API only
accepts tool ids matching ``^[a-zA-Z0-9_-]{1,64}$`` (ids from other providers, e.g.
``functions.write_todos:0``, or empty ones, 400)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence

from agentbus_redis.messages.content import ContentBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import ApiMessage
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs
from agentbus_redis.normalize.safety.block_safety import map_blocks

VALID_TOOL_ID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHARS = re.compile(r"[^a-zA-Z0-9_-]")


def _client_tool_ids(messages: Sequence[ApiMessage]) -> list[str]:
    """Every tool_use id and tool_result tool_use_id, in order of appearance."""
    found: list[str] = []
    for message in messages:
        for block in message.blocks:
            if isinstance(block, ToolUseBlock):
                found.append(block.id)
            elif isinstance(block, ToolResultBlock):
                found.append(block.tool_use_id)
    return found


def safe_tool_id(original: str, taken: set[str]) -> str:
    """A valid id for ``original``: invalid characters become ``_`` and the id is cut to 64; if that
    is empty or already taken, a digest of the original keeps it distinct. Deterministic."""
    base = _INVALID_CHARS.sub("_", original)[:64] or "toolu"
    candidate = base
    attempt = 0
    while candidate in taken:
        attempt += 1
        digest = hashlib.sha256(f"{original}\0{attempt}".encode()).hexdigest()[:12]
        candidate = f"{base[:51]}_{digest}"
    return candidate


def tool_id_mapping(messages: Sequence[ApiMessage]) -> dict[str, str]:
    """Invalid id → its replacement, never equal to any valid id of the request nor to another
    replacement (so distinct ids stay distinct)."""
    ids = _client_tool_ids(messages)
    taken = {tool_id for tool_id in ids if VALID_TOOL_ID.match(tool_id)}
    mapping: dict[str, str] = {}
    for tool_id in ids:
        if tool_id in taken or tool_id in mapping:
            continue
        mapping[tool_id] = safe_tool_id(tool_id, taken)
        taken.add(mapping[tool_id])
    return mapping


def rewrite_invalid_tool_ids(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.11: rewrite invalid ids consistently on ``tool_use.id`` and ``tool_result.tool_use_id``."""
    mapping = tool_id_mapping(messages)
    if not mapping:
        return list(messages), []

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        result: list[ContentBlock] = []
        repairs: Repairs = []
        for block in blocks:
            field = "id" if isinstance(block, ToolUseBlock) else "tool_use_id"
            old_id = getattr(block, field) if isinstance(block, ToolUseBlock | ToolResultBlock) else None
            if old_id not in mapping:
                result.append(block)
                continue
            new_id = mapping[old_id]
            result.append(block.model_copy(update={field: new_id}))
            repairs.append(
                Repair(
                    kind=RepairKind.TOOL_ID_REWRITTEN,
                    rule="API §1.11",
                    message_uuid=message.uuid,
                    tool_use_id=new_id,
                    detail=f"{old_id!r} -> {new_id!r} ({block.type})",
                )
            )
        return result, repairs

    return map_blocks(messages, rule)
