"""Tool-related block rules: R4.6 step 1 (tool_reference stripping) and step 3 (``Tool loaded.``),
R4.7 step 1 (tool_use canonical name / input / shape) and the ``caller`` strip of R4.22."""

from __future__ import annotations

from collections.abc import Callable

from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.constants import (
    TOOL_REFERENCE_TURN_BOUNDARY,
    TOOL_REFERENCES_REMOVED_NO_SEARCH,
    TOOL_REFERENCES_REMOVED_UNAVAILABLE,
)
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolReferenceBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.normalize.options import EXIT_PLAN_MODE_TOOL_NAME, FILE_EDIT_TOOL_NAME, NormalizeOptions
from agentbus_redis.normalize.passes.content_ops import (
    content_has_tool_reference,
    with_assistant_content,
    with_user_content,
)
from agentbus_redis.normalize.report import Repair, RepairKind, Repairs


def _filter_tool_references(
    message: UserMessage, keep: Callable[[ContentBlock], bool], placeholder: str, rule: str
) -> tuple[UserMessage, Repairs]:
    """Remove the tool_reference items ``keep`` rejects from every array-content tool_result; a
    tool_result left with no items gets ``placeholder`` as its only text."""
    content = message.message.content
    if isinstance(content, str):
        return message, []
    repairs: Repairs = []
    rebuilt: list[ContentBlock] = []
    for block in content:
        if not isinstance(block, ToolResultBlock) or not isinstance(block.content, list):
            rebuilt.append(block)
            continue
        kept = [item for item in block.content if item.type != "tool_reference" or keep(item)]
        repairs.extend(
            Repair(
                kind=RepairKind.TOOL_REFERENCE_REMOVED,
                rule=rule,
                message_uuid=message.uuid,
                tool_use_id=block.tool_use_id,
                detail=str(getattr(item, "tool_name", "") or ""),
            )
            for item in block.content
            if item.type == "tool_reference" and not keep(item)
        )
        rebuilt.append(block.model_copy(update={"content": kept or [TextBlock(text=placeholder)]}))
    return with_user_content(message, rebuilt), repairs


def strip_tool_references(message: UserMessage, *, rule: str = "R4.6") -> tuple[UserMessage, Repairs]:
    """R4.6 step 1 (tool search off) / R4.22: tool_reference items are only valid with the
    tool-search beta, so all of them go; emptied tool_results say
    ``[Tool references removed - tool search not enabled]``."""
    content = message.message.content
    if isinstance(content, str) or not content_has_tool_reference(content):
        return message, []
    return _filter_tool_references(message, lambda _item: False, TOOL_REFERENCES_REMOVED_NO_SEARCH, rule)


def strip_unavailable_tool_references(message: UserMessage, options: NormalizeOptions) -> tuple[UserMessage, Repairs]:
    """R4.6 step 1 (tool search on): drop references to tools that no longer exist (the API rejects
    them); emptied tool_results say ``[Tool references removed - tools no longer available]``.
    With an unknown tool set nothing is known to be unavailable, so nothing is removed."""
    tool_names = options.tool_names
    content = message.message.content
    if tool_names is None or isinstance(content, str):
        return message, []

    def available(item: ContentBlock) -> bool:
        name = item.tool_name if isinstance(item, ToolReferenceBlock) else (item.model_extra or {}).get("tool_name")
        return not isinstance(name, str) or not name or options.legacy_normalized(name) in tool_names

    if all(
        available(item)
        for block in content
        if isinstance(block, ToolResultBlock) and isinstance(block.content, list)
        for item in block.content
        if item.type == "tool_reference"
    ):
        return message, []
    return _filter_tool_references(message, available, TOOL_REFERENCES_REMOVED_UNAVAILABLE, "R4.6")


def add_tool_loaded_boundary(message: UserMessage) -> UserMessage:
    """R4.6 step 3 (gate ``tengu_toolref_defer_j8m`` OFF): a user message whose tool_result carries a
    tool_reference gets a sibling ``Tool loaded.`` text (never inside the tool_result) so the model
    sees a clean turn boundary; idempotent (an existing ``Tool loaded.…`` text prevents it)."""
    content = message.message.content
    if isinstance(content, str) or not content_has_tool_reference(content):
        return message
    if any(isinstance(block, TextBlock) and block.text.startswith(TOOL_REFERENCE_TURN_BOUNDARY) for block in content):
        return message
    return with_user_content(message, [*content, TextBlock(text=TOOL_REFERENCE_TURN_BOUNDARY)])


def normalize_tool_input_for_api(tool_name: str, tool_input: JsonValue) -> JsonValue:
    """R4.7 ``normalizeToolInputForAPI``: ExitPlanMode drops the injected ``plan``/``planFilePath``;
    Edit drops the legacy synthetic ``old_string``/``new_string``/``replace_all`` when ``edits`` is
    present. Every other tool's input is sent as stored."""
    if not isinstance(tool_input, dict):
        return tool_input
    if tool_name == EXIT_PLAN_MODE_TOOL_NAME and ("plan" in tool_input or "planFilePath" in tool_input):
        return {key: value for key, value in tool_input.items() if key not in ("plan", "planFilePath")}
    if tool_name == FILE_EDIT_TOOL_NAME and "edits" in tool_input:
        return {
            key: value for key, value in tool_input.items() if key not in ("old_string", "new_string", "replace_all")
        }
    return tool_input


def normalize_tool_use_block(
    block: ToolUseBlock, options: NormalizeOptions, message_uuid: str
) -> tuple[ToolUseBlock, Repairs]:
    """R4.7 step 1: canonical tool name and API input for a known tool (unknown tools keep both);
    with tool search off the block is rebuilt as exactly ``{type, id, name, input}``."""
    canonical = options.canonical_tool_name(block.name)
    name = canonical or block.name
    tool_input = normalize_tool_input_for_api(canonical, block.input) if canonical else block.input
    repairs: Repairs = []
    if name != block.name:
        repairs.append(
            Repair(
                kind=RepairKind.TOOL_NAME_CANONICALIZED,
                rule="R4.7",
                message_uuid=message_uuid,
                tool_use_id=block.id,
                detail=f"{block.name} -> {name}",
            )
        )
    if tool_input != block.input:
        repairs.append(
            Repair(
                kind=RepairKind.TOOL_INPUT_NORMALIZED,
                rule="R4.7",
                message_uuid=message_uuid,
                tool_use_id=block.id,
                detail=name,
            )
        )
    if options.tool_search_enabled:
        return block.model_copy(update={"name": name, "input": tool_input}), repairs
    if not block.model_extra and name == block.name and tool_input is block.input:
        return block, repairs  # already exactly {type, id, name, input}: the rebuild below would equal it
    if block.model_extra:
        repairs.append(
            Repair(
                kind=RepairKind.TOOL_USE_EXTRA_KEYS_DROPPED,
                rule="R4.7",
                message_uuid=message_uuid,
                tool_use_id=block.id,
                detail=",".join(sorted(block.model_extra)),
            )
        )
    return ToolUseBlock(id=block.id, name=name, input=tool_input), repairs


def normalize_tool_uses(message: AssistantMessage, options: NormalizeOptions) -> tuple[AssistantMessage, Repairs]:
    """R4.7 step 1 over every tool_use of ``message`` (content always becomes a list)."""
    repairs: Repairs = []
    content: list[ContentBlock] = []
    changed = isinstance(message.message.content, str)
    for block in message.blocks:
        if isinstance(block, ToolUseBlock):
            normalized, block_repairs = normalize_tool_use_block(block, options, message.uuid)
            repairs.extend(block_repairs)
            changed = changed or normalized is not block
            block = normalized
        content.append(block)
    # Most replies need nothing: no copy of the message then (two model copies per assistant message per request).
    return (with_assistant_content(message, content) if changed else message), repairs


def strip_caller_fields(message: AssistantMessage) -> tuple[AssistantMessage, Repairs]:
    """R4.22 (model without tool search): if any tool_use carries a non-null ``caller``, every
    tool_use of the message is rebuilt as exactly ``{type, id, name, input}``."""
    blocks = message.blocks
    if not any(isinstance(b, ToolUseBlock) and (b.model_extra or {}).get("caller") is not None for b in blocks):
        return message, []
    repairs = [
        Repair(
            kind=RepairKind.TOOL_USE_EXTRA_KEYS_DROPPED,
            rule="R4.22",
            message_uuid=message.uuid,
            tool_use_id=b.id,
            detail=",".join(sorted(b.model_extra or {})),
        )
        for b in blocks
        if isinstance(b, ToolUseBlock) and b.model_extra
    ]
    content = [ToolUseBlock(id=b.id, name=b.name, input=b.input) if isinstance(b, ToolUseBlock) else b for b in blocks]
    return with_assistant_content(message, content), repairs
