"""Block-level passes of the API safety finalizer (beyond Claude Code): blocks the API would reject
are removed or repaired, each change reported. See anthropic-api-rules.md §1/§3."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from agentbus_redis.api.request_view import SERVER_RESULT_TYPES, SERVER_TOOL_USE_TYPES
from agentbus_redis.api.tool_rules import TOOL_RESULT_CONTENT_TYPES
from agentbus_redis.messages.content import (
    ContentBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_malformed,
    tool_use_id_of,
)
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize.passes.content_ops import is_js_blank, with_content, with_user_content
from agentbus_redis.normalize.passes.merge import hoist_tool_results
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs

USER_BLOCK_TYPES = frozenset({"text", "image", "document", "search_result", "tool_result"})
"""Block types a user message may carry (R1.8)."""
ASSISTANT_BLOCK_TYPES = frozenset(
    {"text", "thinking", "redacted_thinking", "tool_use", *SERVER_TOOL_USE_TYPES, *SERVER_RESULT_TYPES}
)
"""Block types an assistant message may carry without extra betas (R1.8)."""

BlockRule = Callable[[ApiMessage, list[ContentBlock]], tuple[list[ContentBlock], Repairs]]


def map_blocks(messages: Sequence[ApiMessage], rule: BlockRule) -> PassResult:
    """Apply ``rule`` to the block list of every message with list content; messages it leaves
    unchanged are kept as they are (string user content is never passed to ``rule``)."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        if isinstance(message.message.content, str) and isinstance(message, UserMessage):
            result.append(message)
            continue
        blocks = message.blocks
        new_blocks, rule_repairs = rule(message, blocks)
        repairs += rule_repairs
        result.append(with_content(message, new_blocks) if rule_repairs else message)
    return result, repairs


def is_blank_text_for_api(text: str) -> bool:
    """Blank by the API's rule ("must contain non-whitespace text"), under both Python's and
    JavaScript's idea of whitespace (dropping a text of exotic spaces only loses nothing)."""
    return not text.strip() or is_js_blank(text)


def _is_incomplete(block: ContentBlock) -> bool:
    """Malformed (known type missing a required string), or a known type whose other required
    field has the wrong shape (image/document ``source``, server tool ``name``, thinking text)."""
    if is_malformed(block):
        return True
    if block.type in ("image", "document"):
        return not isinstance(getattr(block, "source", None), dict)
    return isinstance(block, ServerToolUseBlock) and not isinstance(block.name, str)


def _report(kind: RepairKind, message: ApiMessage, block: ContentBlock, rule: str) -> Repair:
    tool_use_id = tool_use_id_of(block) or (block.id if isinstance(block, ToolUseBlock | ServerToolUseBlock) else None)
    return Repair(kind=kind, rule=rule, message_uuid=message.uuid, tool_use_id=tool_use_id, detail=block.type)


def drop_malformed_and_unsupported_blocks(
    messages: Sequence[ApiMessage], *, extra_block_types: frozenset[str] = frozenset()
) -> PassResult:
    """API §1: malformed blocks (``is_malformed``, or a required field of the wrong shape) and block
    types the role may not carry — unknown/newer types included — are removed, at the top level and
    inside tool_result content. Pairing already treated malformed tool blocks as absent, so removing
    them keeps every tool_use/tool_result pair intact."""

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        allowed = (USER_BLOCK_TYPES if isinstance(message, UserMessage) else ASSISTANT_BLOCK_TYPES) | extra_block_types
        kept: list[ContentBlock] = []
        repairs: Repairs = []
        for block in blocks:
            if _is_incomplete(block):
                repairs.append(_report(RepairKind.MALFORMED_BLOCK_DROPPED, message, block, "API §1 shape"))
            elif block.type not in allowed:
                repairs.append(_report(RepairKind.UNSUPPORTED_BLOCK_DROPPED, message, block, "API §1 block types"))
            elif isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                items = [item for item in block.content if not _is_incomplete(item)]
                items = [item for item in items if item.type in TOOL_RESULT_CONTENT_TYPES | extra_block_types]
                if len(items) != len(block.content):
                    repairs.append(_report(RepairKind.UNSUPPORTED_BLOCK_DROPPED, message, block, "API §1 tool_result"))
                    block = block.model_copy(update={"content": items})
                kept.append(block)
            else:
                kept.append(block)
        return kept, repairs

    return map_blocks(messages, rule)


def coerce_tool_use_inputs(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1 shape: ``tool_use.input`` must be an object. A JSON string holding an object is parsed,
    anything else becomes ``{}`` (what Claude Code does with unparsable streamed input, R9.7); the
    block itself stays so its tool_result keeps its partner."""

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        result: list[ContentBlock] = []
        repairs: Repairs = []
        for block in blocks:
            if isinstance(block, ToolUseBlock) and not isinstance(block.input, dict):
                parsed: object = None
                if isinstance(block.input, str):
                    try:
                        parsed = json.loads(block.input)
                    except ValueError:
                        parsed = None
                block = block.model_copy(update={"input": parsed if isinstance(parsed, dict) else {}})
                repairs.append(_report(RepairKind.TOOL_INPUT_COERCED, message, block, "R9.7 tool_use.input"))
            result.append(block)
        return result, repairs

    return map_blocks(messages, rule)


def drop_blank_text_blocks(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.8: text blocks must be non-empty and not whitespace-only — everywhere, including inside
    tool_result content (claude-code#62396: a resumed tool_use-only assistant carried an extra empty
    text). A blank string content becomes ``[]`` (filled later)."""

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        kept: list[ContentBlock] = []
        repairs: Repairs = []
        for block in blocks:
            if isinstance(block, TextBlock) and is_blank_text_for_api(block.text):
                repairs.append(_report(RepairKind.BLANK_TEXT_DROPPED, message, block, "API §1.8"))
                continue
            if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                items = [i for i in block.content if not (isinstance(i, TextBlock) and is_blank_text_for_api(i.text))]
                if len(items) != len(block.content):
                    repairs.append(_report(RepairKind.BLANK_TEXT_DROPPED, message, block, "API §1.8 tool_result"))
                    block = block.model_copy(update={"content": items})
            kept.append(block)
        return kept, repairs

    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        content = message.message.content
        if isinstance(message, UserMessage) and isinstance(content, str):
            if is_blank_text_for_api(content):
                repairs.append(Repair(kind=RepairKind.BLANK_TEXT_DROPPED, rule="API §1.8", message_uuid=message.uuid))
                message = with_user_content(message, [])
            result.append(message)
            continue
        mapped, message_repairs = map_blocks([message], rule)
        result += mapped
        repairs += message_repairs
    return result, repairs


def drop_unanswerable_server_tool_blocks(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.2 (server variant) / §1.4: a server tool id is used once in the whole request, and a
    server result needs its ``server_tool_use`` earlier in the same assistant message. Later
    duplicates of a server call are removed, then results whose call is not before them."""
    seen: set[str] = set()

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        if not isinstance(message, AssistantMessage):
            return blocks, []
        kept: list[ContentBlock] = []
        repairs: Repairs = []
        calls: set[str] = set()
        for block in blocks:
            if isinstance(block, ServerToolUseBlock):
                if block.id in seen:
                    repairs.append(_report(RepairKind.DUPLICATE_TOOL_USE_DROPPED, message, block, "API §1.4"))
                    continue
                seen.add(block.id)
                calls.add(block.id)
            result_id = tool_use_id_of(block)
            if block.type != "tool_result" and result_id is not None and result_id not in calls:
                repairs.append(_report(RepairKind.ORPHAN_TOOL_RESULT_DROPPED, message, block, "API §1.2"))
                continue
            kept.append(block)
        return kept, repairs

    return map_blocks(messages, rule)


def hoist_tool_results_first(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.3: in a user message every tool_result precedes any other block (a raw message stored
    as ``[text, tool_result]`` was never hoisted by a merge)."""

    def rule(message: ApiMessage, blocks: list[ContentBlock]) -> tuple[list[ContentBlock], Repairs]:
        hoisted = hoist_tool_results(blocks)
        if not isinstance(message, UserMessage) or [b.type for b in hoisted] == [b.type for b in blocks]:
            return blocks, []
        return hoisted, [Repair(kind=RepairKind.TOOL_RESULTS_HOISTED, rule="API §1.3", message_uuid=message.uuid)]

    return map_blocks(messages, rule)
