"""``normalizeMessagesForAPI`` (§4.1–§4.4, R4.1–R4.21): the conversation as Claude Code stores it
(every message kind) → the user/assistant messages it sends, still as internal messages."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.messages.kinds import ApiMessage, Message
from agentbus_redis.normalize.attachments.order import reorder_attachments_for_api
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.passes.fold import fold_messages
from agentbus_redis.normalize.passes.post_passes import (
    append_message_id_tags,
    ensure_non_empty_assistant_content,
    filter_orphaned_thinking_only_messages,
    filter_trailing_thinking_from_last_assistant,
    filter_whitespace_only_assistant_messages,
    fold_system_reminders_into_results,
    relocate_tool_reference_siblings,
    sanitize_error_tool_result_content,
    validate_images_for_api,
)
from agentbus_redis.normalize.passes.prepass import build_media_strip_targets, drop_virtual_messages, filter_api_bound
from agentbus_redis.normalize.report import NormalizationReport, Repairs


def normalize_messages_for_api(
    messages: Sequence[Message], *, options: NormalizeOptions
) -> tuple[list[ApiMessage], NormalizationReport]:
    """R4.1–R4.21 in Claude Code's order. Raises :class:`agentbus_redis.errors.ImageSizeError` (R4.21)."""
    repairs: Repairs = []
    reordered = drop_virtual_messages(reorder_attachments_for_api(messages))  # R4.1, R4.2
    strip_targets = build_media_strip_targets(reordered, interactive=options.interactive)  # R4.3
    result, fold_repairs = fold_messages(filter_api_bound(reordered), options, strip_targets)  # R4.4–R4.9
    repairs += fold_repairs
    if options.toolref_defer:
        result = relocate_tool_reference_siblings(result)  # R4.13
    for post_pass in (
        filter_orphaned_thinking_only_messages,  # R4.14
        filter_trailing_thinking_from_last_assistant,  # R4.15
    ):
        result, pass_repairs = post_pass(result)
        repairs += pass_repairs
    result, pass_repairs = filter_whitespace_only_assistant_messages(result, snip=options.snip)  # R4.16
    repairs += pass_repairs
    result, pass_repairs = ensure_non_empty_assistant_content(result)  # R4.17
    repairs += pass_repairs
    if options.chair_sermon:
        result = fold_system_reminders_into_results(result, snip=options.snip)  # R4.18
    result, pass_repairs = sanitize_error_tool_result_content(result)  # R4.19
    repairs += pass_repairs
    if options.snip:
        result = append_message_id_tags(result)  # R4.20
    validate_images_for_api(result, max_base64_bytes=options.max_image_base64_bytes)  # R4.21
    return result, NormalizationReport(repairs=tuple(repairs))
