"""Post-passes of ``normalizeMessagesForAPI`` (§4.4), run in this exact order: R4.13 (gated),
R4.14, R4.15, R4.16, R4.17, R4.18 (gated), R4.19, R4.20 (gated), R4.21."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.errors import ImageSizeError, OversizedImage
from agentbus_redis.messages.constants import NO_CONTENT_MESSAGE, NO_MESSAGE_CONTENT
from agentbus_redis.messages.content import ContentBlock, ImageBlock, TextBlock, ToolResultBlock, is_thinking
from agentbus_redis.messages.factories import derive_short_message_id
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize.attachments.render import SYSTEM_REMINDER_OPEN
from agentbus_redis.normalize.passes.content_ops import (
    content_has_tool_reference,
    is_js_blank,
    placeholder_text,
    with_assistant_content,
    with_user_content,
)
from agentbus_redis.normalize.passes.merge import merge_adjacent_user_messages, smoosh_into_tool_result
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind


def relocate_tool_reference_siblings(messages: Sequence[ApiMessage]) -> list[ApiMessage]:
    """R4.13 (gate ``tengu_toolref_defer_j8m`` ON): text siblings of a tool_reference-carrying result
    move to the end of the next user message that has a tool_result and no tool_reference (a text
    right after the expanded tool list teaches the model to stop); with no such message they stay."""
    result = list(messages)
    for index, message in enumerate(result):
        if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
            continue
        content = message.message.content
        texts = [block for block in content if block.type == "text"]
        if not texts or not content_has_tool_reference(content):
            continue
        for target_index in range(index + 1, len(result)):
            target = result[target_index]
            if not isinstance(target, UserMessage) or isinstance(target.message.content, str):
                continue
            target_content = target.message.content
            if any(b.type == "tool_result" for b in target_content) and not content_has_tool_reference(target_content):
                result[index] = with_user_content(message, [b for b in content if b.type != "text"])
                result[target_index] = with_user_content(target, [*target_content, *texts])
                break
    return result


def _all_thinking(content: Sequence[ContentBlock]) -> bool:
    return all(is_thinking(block) for block in content)


def _is_orphaned_thinking_only(message: AssistantMessage, ids_with_content: set[str]) -> bool:
    blocks = message.blocks
    return (
        bool(blocks) and _all_thinking(blocks) and not (message.message.id and message.message.id in ids_with_content)
    )


def filter_orphaned_thinking_only_messages(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.14: a non-empty, thinking-only assistant is dropped unless another assistant with the same
    ``message.id`` has non-thinking content (a failed stream's leftover would break the signature
    check next to its retry)."""
    ids_with_content = {
        m.message.id
        for m in messages
        if isinstance(m, AssistantMessage) and m.message.id and not _all_thinking(m.blocks)
    }
    kept: list[ApiMessage] = []
    repairs: list[Repair] = []
    for message in messages:
        if isinstance(message, AssistantMessage) and _is_orphaned_thinking_only(message, ids_with_content):
            repairs.append(
                Repair(
                    kind=RepairKind.ORPHANED_THINKING_DROPPED,
                    rule="R4.14",
                    message_uuid=message.uuid,
                    detail=f"{len(message.blocks)} block(s), message.id={message.message.id}",
                )
            )
            continue
        kept.append(message)
    return kept, repairs


def filter_trailing_thinking_from_last_assistant(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.15: a final assistant may not end with thinking; its trailing thinking run is removed
    (``[No message content]`` when nothing is left)."""
    last = messages[-1] if messages else None
    if not isinstance(last, AssistantMessage) or not last.blocks or not is_thinking(last.blocks[-1]):
        return list(messages), []
    content = last.blocks
    end = len(content)
    while end > 0 and is_thinking(content[end - 1]):
        end -= 1
    kept = content[:end] or [placeholder_text(NO_MESSAGE_CONTENT)]
    repair = Repair(
        kind=RepairKind.TRAILING_THINKING_DROPPED,
        rule="R4.15",
        message_uuid=last.uuid,
        detail=f"{len(content) - end} block(s)",
    )
    return [*messages[:-1], with_assistant_content(last, kept)], [repair]


def filter_whitespace_only_assistant_messages(messages: Sequence[ApiMessage], *, snip: bool = False) -> PassResult:
    """R4.16: assistants whose non-empty content is only blank text are removed ("text content blocks
    must contain non-whitespace text"); if any went, now-adjacent user messages are merged (R4.10)."""
    kept: list[ApiMessage] = []
    repairs: list[Repair] = []
    for message in messages:
        blocks = message.blocks if isinstance(message, AssistantMessage) else []
        if blocks and all(isinstance(b, TextBlock) and is_js_blank(b.text) for b in blocks):
            repairs.append(
                Repair(kind=RepairKind.WHITESPACE_ASSISTANT_DROPPED, rule="R4.16", message_uuid=message.uuid)
            )
            continue
        kept.append(message)
    if not repairs:
        return kept, []
    return merge_adjacent_user_messages(kept, snip=snip), repairs


def ensure_non_empty_assistant_content(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.17: an assistant with ``[]`` content that is not the last message gets ``(no content)``; the
    last one may stay empty (prefill)."""
    result: list[ApiMessage] = []
    repairs: list[Repair] = []
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage) and index < len(messages) - 1 and not message.blocks:
            repairs.append(Repair(kind=RepairKind.EMPTY_ASSISTANT_FILLED, rule="R4.17", message_uuid=message.uuid))
            message = with_assistant_content(message, [placeholder_text(NO_CONTENT_MESSAGE)])
        result.append(message)
    return result, repairs


def smoosh_system_reminder_siblings(messages: Sequence[ApiMessage]) -> list[ApiMessage]:
    """R4.18 second half: in a user message with a tool_result, every text starting with
    ``<system-reminder>`` is folded into the *last* tool_result (R4.12); left alone when impossible."""
    result: list[ApiMessage] = []
    for message in messages:
        if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
            result.append(message)
            continue
        content = message.message.content
        if not any(b.type == "tool_result" for b in content):
            result.append(message)
            continue
        reminders = [b for b in content if isinstance(b, TextBlock) and b.text.startswith(SYSTEM_REMINDER_OPEN)]
        kept = [b for b in content if not (isinstance(b, TextBlock) and b.text.startswith(SYSTEM_REMINDER_OPEN))]
        last_index = max(i for i, b in enumerate(kept) if b.type == "tool_result")
        last = kept[last_index]
        folded = smoosh_into_tool_result(last, reminders) if reminders and isinstance(last, ToolResultBlock) else None
        if folded is None:
            result.append(message)
            continue
        result.append(with_user_content(message, [*kept[:last_index], folded, *kept[last_index + 1 :]]))
    return result


def fold_system_reminders_into_results(messages: Sequence[ApiMessage], *, snip: bool = False) -> list[ApiMessage]:
    """R4.18 (gate ``tengu_chair_sermon`` ON): merge adjacent users, then fold reminder siblings."""
    return smoosh_system_reminder_siblings(merge_adjacent_user_messages(messages, snip=snip))


def _is_error_result_with_non_text(block: ContentBlock) -> bool:
    return (
        isinstance(block, ToolResultBlock)
        and bool(block.is_error)
        and isinstance(block.content, list)
        and not all(item.type == "text" for item in block.content)
    )


def sanitize_error_tool_result_content(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.19: an ``is_error`` tool_result may only hold text ("all content must be type text if
    is_error is true"); non-text items go and the texts become one block joined by a blank line."""
    result: list[ApiMessage] = []
    repairs: list[Repair] = []
    for message in messages:
        if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
            result.append(message)
            continue
        content = message.message.content
        rebuilt: list[ContentBlock] = []
        for block in content:
            if (
                isinstance(block, ToolResultBlock)
                and isinstance(block.content, list)
                and _is_error_result_with_non_text(block)
            ):
                texts = [item.text for item in block.content if isinstance(item, TextBlock)]
                block = block.model_copy(update={"content": [TextBlock(text="\n\n".join(texts))] if texts else []})
                repairs.append(
                    Repair(
                        kind=RepairKind.ERROR_TOOL_RESULT_SANITIZED,
                        rule="R4.19",
                        message_uuid=message.uuid,
                        tool_use_id=block.tool_use_id,
                    )
                )
            rebuilt.append(block)
        changed = any(_is_error_result_with_non_text(block) for block in content)
        result.append(with_user_content(message, rebuilt) if changed else message)
    return result, repairs


def append_message_id_tags(messages: Sequence[ApiMessage]) -> list[ApiMessage]:
    """R4.20 (internal HISTORY_SNIP): ``\\n[id:<short>]`` (R2.4d) after the string or the last text of
    every non-meta user message, so the model can name messages to the snip tool."""
    result: list[ApiMessage] = []
    for message in messages:
        if not isinstance(message, UserMessage) or message.is_meta:
            result.append(message)
            continue
        tag = f"\n[id:{derive_short_message_id(message.uuid)}]"
        content = message.message.content
        if isinstance(content, str):
            result.append(with_user_content(message, content + tag))
            continue
        tagged = [(i, block) for i, block in enumerate(content) if isinstance(block, TextBlock)]
        if not tagged:
            result.append(message)
            continue
        i, block = tagged[-1]
        result.append(
            with_user_content(
                message, [*content[:i], block.model_copy(update={"text": block.text + tag}), *content[i + 1 :]]
            )
        )
    return result


def validate_images_for_api(messages: Sequence[ApiMessage], *, max_base64_bytes: int) -> None:
    """R4.21: any top-level base64 image of a user message longer than the limit fails the whole call
    with :class:`ImageSizeError` naming every oversized image."""
    oversized: list[OversizedImage] = []
    number = 0
    for message in messages:
        if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
            continue
        for block_index, block in enumerate(message.message.content):
            source = block.source if isinstance(block, ImageBlock) else None
            if source is None or source.get("type") != "base64" or not isinstance(source.get("data"), str):
                continue
            number += 1
            size = len(str(source["data"]))
            if size > max_base64_bytes:
                oversized.append(OversizedImage(number, size, message.uuid, block_index))
    if oversized:
        raise ImageSizeError(oversized, limit=max_base64_bytes)
