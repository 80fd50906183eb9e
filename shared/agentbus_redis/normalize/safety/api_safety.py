"""The API safety finalizer ("beyond Claude Code"): after the R4.22–R4.23 steps, make the request one
the Messages API never rejects (anthropic-api-rules.md §3), including where Claude Code itself 400s.

Each fix is a named pass that reports what it changed; passes run in the order of
:data:`SAFETY_PASSES` and :func:`make_api_safe` adds the message-level ones.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import NO_CONTENT_MESSAGE
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.passes.content_ops import js_trim_end, with_assistant_content, with_user_content
from agentbus_redis.normalize.passes.merge import merge_assistant_messages, merge_user_messages
from agentbus_redis.normalize.passes.post_passes import filter_trailing_thinking_from_last_assistant
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs
from agentbus_redis.normalize.safety.block_safety import (
    coerce_tool_use_inputs,
    drop_blank_text_blocks,
    drop_malformed_and_unsupported_blocks,
    drop_unanswerable_server_tool_blocks,
    hoist_tool_results_first,
)
from agentbus_redis.normalize.safety.tool_ids import rewrite_invalid_tool_ids
from agentbus_redis.normalize.thinking_replay import drop_open_turn_thinking_when_disabled, drop_unreplayable_thinking


def fill_or_drop_empty_messages(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.7: every message has content except an optional final assistant (prefill). An emptied
    user message gets ``(no content)``; an emptied assistant is dropped unless it is the last message.
    (An assistant holding a tool_use is never empty, so no pair is broken.)"""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for index, message in enumerate(messages):
        if message.blocks:
            result.append(message)
        elif isinstance(message, UserMessage):
            repairs.append(Repair(kind=RepairKind.EMPTY_USER_FILLED, rule="API §1.7", message_uuid=message.uuid))
            result.append(with_user_content(message, [TextBlock(text=NO_CONTENT_MESSAGE)]))
        elif index == len(messages) - 1:
            result.append(message)
        else:
            repairs.append(Repair(kind=RepairKind.EMPTY_ASSISTANT_DROPPED, rule="API §1.7", message_uuid=message.uuid))
    return result, repairs


def merge_same_role_neighbours(messages: Sequence[ApiMessage], *, snip: bool = False) -> PassResult:
    """API §1.5: roles alternate. Adjacent users merge as in R4.10 (seam, tool_results first); adjacent
    assistants merge as in R4.7 (content appended) — what the first-party API does to consecutive
    turns anyway, made explicit for providers that reject them."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        previous = result[-1] if result else None
        if isinstance(previous, UserMessage) and isinstance(message, UserMessage):
            result[-1] = merge_user_messages(previous, message, snip=snip)
            kind = RepairKind.USER_MESSAGES_MERGED
        elif isinstance(previous, AssistantMessage) and isinstance(message, AssistantMessage):
            result[-1] = merge_assistant_messages(previous, message)
            kind = RepairKind.ASSISTANT_MESSAGES_MERGED
        else:
            result.append(message)
            continue
        repairs.append(Repair(kind=kind, rule="API §1.5", message_uuid=message.uuid, detail=f"into {previous.uuid}"))
    return result, repairs


def ensure_first_message_is_user(
    messages: Sequence[ApiMessage], *, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> PassResult:
    """API §1.6: the request starts with a user message (and has at least one message); otherwise a
    meta ``(no content)`` user message is put first."""
    if messages and isinstance(messages[0], UserMessage):
        return list(messages), []
    leading = create_user_message(NO_CONTENT_MESSAGE, is_meta=True, clock=clock, ids=ids)
    repair = Repair(kind=RepairKind.LEADING_USER_INSERTED, rule="API §1.6", message_uuid=leading.uuid)
    return [leading, *messages], [repair]


def _trim_end(text: str) -> str:
    """Trailing whitespace by Python's and JavaScript's definitions both."""
    trimmed = js_trim_end(text.rstrip())
    return trimmed if trimmed == text else _trim_end(trimmed)


def trim_final_assistant_trailing_whitespace(messages: Sequence[ApiMessage]) -> PassResult:
    """API §1.9: "final assistant content cannot end with trailing whitespace" (prefill)."""
    last = messages[-1] if messages else None
    if not isinstance(last, AssistantMessage) or not last.blocks or not isinstance(last.blocks[-1], TextBlock):
        return list(messages), []
    block = last.blocks[-1]
    trimmed = _trim_end(block.text)
    if trimmed == block.text:
        return list(messages), []
    repair = Repair(kind=RepairKind.TRAILING_WHITESPACE_TRIMMED, rule="API §1.9", message_uuid=last.uuid)
    content = [*last.blocks[:-1], block.model_copy(update={"text": trimmed})]
    return [*messages[:-1], with_assistant_content(last, content)], [repair]


def make_api_safe(
    messages: Sequence[ApiMessage],
    *,
    options: NormalizeOptions,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> PassResult:
    """Every safety pass, in order: block shape and placement, server tool pairs, blank text, thinking
    replay, tool ids, tool_results first, empty messages, role alternation, leading user; then, on the
    final structure, thinking of the open turn (when disabled), R4.15 once more (blank-text removal
    may have left the final assistant ending with thinking) and the final trim."""
    repairs: Repairs = []
    result = list(messages)
    steps = (
        lambda m: drop_malformed_and_unsupported_blocks(m, extra_block_types=options.extra_block_types),
        coerce_tool_use_inputs,
        drop_unanswerable_server_tool_blocks,
        drop_blank_text_blocks,
        lambda m: drop_unreplayable_thinking(m, target_model=options.target_model),
        rewrite_invalid_tool_ids,
        hoist_tool_results_first,
        fill_or_drop_empty_messages,
        lambda m: merge_same_role_neighbours(m, snip=options.snip),
        lambda m: ensure_first_message_is_user(m, clock=clock, ids=ids),
        lambda m: drop_open_turn_thinking_when_disabled(m, thinking_enabled=options.thinking_enabled),
        filter_trailing_thinking_from_last_assistant,
        trim_final_assistant_trailing_whitespace,
    )
    for step in steps:
        result, step_repairs = step(result)
        repairs += step_repairs
    return result, repairs
