"""Steps the API client runs after ``normalizeMessagesForAPI`` (§4.5, R4.22–R4.23): tool-search field
stripping → ``ensure_tool_result_pairing`` → advisor block stripping → ``stripExcessMediaItems``."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import ADVISOR_RESPONSE
from agentbus_redis.messages.content import (
    ContentBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    is_thinking,
)
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.messages.pairing import PairingFix, PairingReport, ensure_tool_result_pairing
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.passes.content_ops import (
    is_js_blank,
    placeholder_text,
    with_assistant_content,
    with_content,
)
from agentbus_redis.normalize.passes.tool_blocks import strip_caller_fields, strip_tool_references
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs

MEDIA_TYPES = frozenset({"image", "document"})


def strip_tool_search_fields(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.22 (model without tool search): tool_reference items and tool_use ``caller`` fields are
    only valid with the tool-search beta, so they are stripped once more."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        if isinstance(message, UserMessage):
            stripped_user, step_repairs = strip_tool_references(message, rule="R4.22")
            result.append(stripped_user)
        else:
            stripped_assistant, step_repairs = strip_caller_fields(message)
            result.append(stripped_assistant)
        repairs += step_repairs
    return result, repairs


def _is_advisor_block(block: ContentBlock) -> bool:
    """``isAdvisorBlock``: an ``advisor_tool_result`` or a ``server_tool_use`` named ``advisor``."""
    return block.type == "advisor_tool_result" or (
        isinstance(block, ServerToolUseBlock) and block.type == "server_tool_use" and block.name == "advisor"
    )


def strip_advisor_blocks(messages: Sequence[ApiMessage]) -> PassResult:
    """R4.22: without the advisor beta header the API rejects advisor blocks, so they go; an assistant
    left empty, or with only thinking / blank text, gets an ``[Advisor response]`` text."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        blocks = message.blocks if isinstance(message, AssistantMessage) else []
        kept = [block for block in blocks if not _is_advisor_block(block)]
        if not isinstance(message, AssistantMessage) or len(kept) == len(blocks):
            result.append(message)
            continue
        repairs.append(
            Repair(
                kind=RepairKind.ADVISOR_BLOCK_STRIPPED,
                rule="R4.22",
                message_uuid=message.uuid,
                detail=f"{len(blocks) - len(kept)} block(s)",
            )
        )
        if all(is_thinking(b) or (isinstance(b, TextBlock) and is_js_blank(b.text)) for b in kept):
            kept.append(placeholder_text(ADVISOR_RESPONSE))
        result.append(with_assistant_content(message, kept))
    return result, repairs


def _media_count(message: ApiMessage) -> int:
    if isinstance(message.message.content, str):
        return 0
    count = 0
    for block in message.message.content:
        count += block.type in MEDIA_TYPES
        if isinstance(block, ToolResultBlock) and isinstance(block.content, list):
            count += sum(item.type in MEDIA_TYPES for item in block.content)
    return count


def strip_excess_media_items(messages: Sequence[ApiMessage], *, limit: int) -> PassResult:
    """R4.23: at most ``limit`` images+documents per request (top level and inside tool_results); the
    oldest go first — scanning from the start, within a message those nested in tool_results before
    top-level ones."""
    to_remove = sum(map(_media_count, messages)) - limit
    if to_remove <= 0:
        return list(messages), []
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for message in messages:
        if to_remove <= 0 or isinstance(message.message.content, str):
            result.append(message)
            continue
        before = to_remove
        nested_stripped: list[ContentBlock] = []
        for block in message.message.content:
            if to_remove > 0 and isinstance(block, ToolResultBlock) and isinstance(block.content, list):
                kept_items: list[ContentBlock] = []
                for item in block.content:
                    if to_remove > 0 and item.type in MEDIA_TYPES:
                        to_remove -= 1
                    else:
                        kept_items.append(item)
                if len(kept_items) != len(block.content):
                    block = block.model_copy(update={"content": kept_items})
            nested_stripped.append(block)
        content: list[ContentBlock] = []
        for block in nested_stripped:
            if to_remove > 0 and block.type in MEDIA_TYPES:
                to_remove -= 1
            else:
                content.append(block)
        if to_remove == before:
            result.append(message)
            continue
        repairs.append(
            Repair(
                kind=RepairKind.EXCESS_MEDIA_STRIPPED,
                rule="R4.23",
                message_uuid=message.uuid,
                detail=f"{before - to_remove} item(s)",
            )
        )
        result.append(with_content(message, content))
    return result, repairs


_PAIRING_FIX_KINDS = (
    ("placeholders_inserted", RepairKind.PLACEHOLDER_TOOL_RESULT_INSERTED, "R4.28"),
    ("orphan_results_dropped", RepairKind.ORPHAN_TOOL_RESULT_DROPPED, "R4.25"),
    ("duplicate_tool_uses_dropped", RepairKind.DUPLICATE_TOOL_USE_DROPPED, "R4.26"),
    ("duplicate_results_dropped", RepairKind.DUPLICATE_TOOL_RESULT_DROPPED, "R4.28"),
    ("server_tool_uses_dropped", RepairKind.SERVER_TOOL_USE_DROPPED, "R4.26"),
)


def pairing_repairs(report: PairingReport, before: Sequence[ApiMessage], after: Sequence[ApiMessage]) -> Repairs:
    """The :class:`PairingReport` as repairs located by message uuid (input indexes resolve against
    ``before``, the inserted messages' output indexes against ``after``)."""

    def uuid_at(messages: Sequence[ApiMessage], index: int) -> str | None:
        return messages[index].uuid if 0 <= index < len(messages) else None

    repairs: Repairs = []
    for field, kind, rule in _PAIRING_FIX_KINDS:
        fixes: tuple[PairingFix, ...] = getattr(report, field)
        repairs.extend(
            Repair(kind=kind, rule=rule, message_uuid=uuid_at(before, fix.message_index), tool_use_id=fix.tool_use_id)
            for fix in fixes
        )
    for indexes, kind, rule, messages in (
        (report.interrupted_assistants, RepairKind.TOOL_USE_INTERRUPTED, "R4.26", before),
        (report.dropped_messages, RepairKind.ORPHAN_MESSAGE_DROPPED, "R4.25", before),
        (report.emptied_messages, RepairKind.RESULT_MESSAGE_EMPTIED, "R4.28", before),
        (report.inserted_messages, RepairKind.PLACEHOLDER_MESSAGE_INSERTED, "R4.29", after),
    ):
        repairs.extend(Repair(kind=kind, rule=rule, message_uuid=uuid_at(messages, index)) for index in indexes)
    return repairs


def order_tool_results_by_call(messages: Sequence[ApiMessage]) -> list[ApiMessage]:
    """The tool_result blocks answering an assistant message's calls in the order of its tool_use blocks (each
    result takes the place of the one it swaps with; other blocks stay where they are). Claude Code sends them
    in the order they completed (R8.8); the bus, whose parallel calls may run in different tool pools, sends
    them in call order (agent-loop.md A7.2: the tool_use order is the safest for the API). Run after pairing,
    which puts every result of assistant k in message k+1."""
    result = list(messages)
    for index in range(1, len(result)):
        message, previous = result[index], result[index - 1]
        if not isinstance(message, UserMessage) or not isinstance(previous, AssistantMessage):
            continue
        content = message.message.content
        if isinstance(content, str):
            continue
        calls = [block.id for block in previous.blocks if isinstance(block, ToolUseBlock)]
        position = {tool_use_id: order for order, tool_use_id in enumerate(calls)}
        slots = [n for n, block in enumerate(content) if isinstance(block, ToolResultBlock)]
        if len(slots) < 2:
            continue
        results = [block for block in content if isinstance(block, ToolResultBlock)]
        ordered = sorted(results, key=lambda block: position.get(block.tool_use_id, len(position)))
        if ordered == results:
            continue
        blocks = list(content)
        for slot, block in zip(slots, ordered, strict=True):
            blocks[slot] = block
        result[index] = with_content(message, blocks)
    return result


def apply_api_client_steps(
    messages: Sequence[ApiMessage],
    *,
    options: NormalizeOptions,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> tuple[list[ApiMessage], Repairs, PairingReport]:
    """R4.22 in order, then R4.23. Raises :class:`agentbus_redis.errors.PairingRepairRequired` in strict mode."""
    repairs: Repairs = []
    result = list(messages)
    if not options.tool_search_enabled:
        result, step_repairs = strip_tool_search_fields(result)
        repairs += step_repairs
    paired, pairing_report = ensure_tool_result_pairing(result, strict=options.strict_pairing, clock=clock, ids=ids)
    repairs += pairing_repairs(pairing_report, result, paired)
    result = order_tool_results_by_call(paired) if options.results_in_call_order else paired
    if not options.advisor_enabled:
        result, step_repairs = strip_advisor_blocks(result)
        repairs += step_repairs
    result, step_repairs = strip_excess_media_items(result, limit=options.media_limit)
    repairs += step_repairs
    return result, repairs, pairing_report
