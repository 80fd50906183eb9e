"""Merging helpers (§4.3): R4.10 ``mergeUserMessages``, R4.11 ``mergeUserMessagesAndToolResults``,
R4.12 ``smooshIntoToolResult``, plus the tool_result hoist and the same-id assistant merge of R4.7."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock, as_blocks
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize.passes.content_ops import js_trim, with_assistant_content, with_user_content


def hoist_tool_results(content: Sequence[ContentBlock]) -> list[ContentBlock]:
    """R4.10: every tool_result first (relative order kept), then every other block — the API wants
    the results of a turn at the front of the user message (API §1.3)."""
    results = [block for block in content if block.type == "tool_result"]
    others = [block for block in content if block.type != "tool_result"]
    return [*results, *others]


def join_text_at_seam(a: Sequence[ContentBlock], b: Sequence[ContentBlock]) -> list[ContentBlock]:
    """R4.10 seam rule: when a ends and b starts with text, a's last text gets a trailing ``\\n`` (the
    API concatenates adjacent texts without a separator; blocks stay separate so b's prefix — e.g.
    ``<system-reminder>`` — is untouched)."""
    if a and b and isinstance(a[-1], TextBlock) and isinstance(b[0], TextBlock):
        last = a[-1]
        return [*a[:-1], last.model_copy(update={"text": last.text + "\n"}), *b]
    return [*a, *b]


def merge_user_messages(a: UserMessage, b: UserMessage, *, snip: bool = False) -> UserMessage:
    """R4.10: a's fields with the seam-joined, hoisted content; the uuid is b's when a is meta (so a
    real prompt's uuid — the base of snip ``[id:]`` tags — survives). With the snip feature the result
    is meta only when both were meta."""
    content = hoist_tool_results(join_text_at_seam(a.blocks, b.blocks))
    merged = with_user_content(a, content).model_copy(update={"uuid": b.uuid if a.is_meta else a.uuid})
    if snip:
        merged = merged.model_copy(update={"is_meta": True if a.is_meta and b.is_meta else None})
    return merged


def merge_adjacent_user_messages(messages: Sequence[ApiMessage], *, snip: bool = False) -> list[ApiMessage]:
    """Every run of consecutive user messages folded left with :func:`merge_user_messages`."""
    merged: list[ApiMessage] = []
    for message in messages:
        previous = merged[-1] if merged else None
        if isinstance(message, UserMessage) and isinstance(previous, UserMessage):
            merged[-1] = merge_user_messages(previous, message, snip=snip)
        else:
            merged.append(message)
    return merged


def smoosh_into_tool_result(tool_result: ToolResultBlock, blocks: Sequence[ContentBlock]) -> ToolResultBlock | None:
    """R4.12: fold ``blocks`` into the tool_result's content; ``None`` when impossible (a
    tool_reference may not share a tool_result with other blocks). An ``is_error`` result only takes
    text (the API rejects non-text there). String/absent content plus only text stays a string
    (trimmed parts joined by a blank line); otherwise adjacent texts are merged with a blank line."""
    if not blocks:
        return tool_result
    existing = tool_result.content
    if isinstance(existing, list) and any(item.type == "tool_reference" for item in existing):
        return None
    incoming = list(blocks)
    if tool_result.is_error:
        incoming = [block for block in incoming if isinstance(block, TextBlock)]
        if not incoming:
            return tool_result
    if all(isinstance(block, TextBlock) for block in incoming) and not isinstance(existing, list):
        parts = [js_trim(existing or ""), *(js_trim(block.text) for block in incoming if isinstance(block, TextBlock))]
        return tool_result.model_copy(update={"content": "\n\n".join(part for part in parts if part)})
    base: list[ContentBlock]
    if existing is None:
        base = []
    elif isinstance(existing, str):
        base = [TextBlock(text=js_trim(existing))] if js_trim(existing) else []
    else:
        base = list(existing)
    merged: list[ContentBlock] = []
    for block in [*base, *incoming]:
        if isinstance(block, TextBlock):
            text = js_trim(block.text)
            if not text:
                continue
            previous = merged[-1] if merged else None
            if isinstance(previous, TextBlock):
                merged[-1] = previous.model_copy(update={"text": f"{previous.text}\n\n{text}"})
            else:
                merged.append(TextBlock(text=text))
        else:
            merged.append(block)
    return tool_result.model_copy(update={"content": merged})


def merge_user_content_blocks(
    a: Sequence[ContentBlock], b: Sequence[ContentBlock], *, chair_sermon: bool = False
) -> list[ContentBlock]:
    """R4.11 ``mergeUserContentBlocks``: plain concatenation unless a ends with a tool_result, in
    which case b is folded into it (legacy: only all-text b into a string result; gated universal
    smoosh: every non-tool_result block of b, b's own tool_results following as siblings)."""
    last = a[-1] if a else None
    if not isinstance(last, ToolResultBlock):
        return [*a, *b]
    if not chair_sermon:
        if isinstance(last.content, str) and all(block.type == "text" for block in b):
            folded = smoosh_into_tool_result(last, b)
            assert folded is not None  # a string result holds no tool_reference
            return [*a[:-1], folded]
        return [*a, *b]
    to_fold = [block for block in b if block.type != "tool_result"]
    results = [block for block in b if block.type == "tool_result"]
    if not to_fold:
        return [*a, *b]
    folded = smoosh_into_tool_result(last, to_fold)
    if folded is None:
        return [*a, *b]
    return [*a[:-1], folded, *results]


def merge_user_messages_and_tool_results(a: UserMessage, b: UserMessage, *, chair_sermon: bool = False) -> UserMessage:
    """R4.11: fold an attachment-produced user message b into a — no seam rule, a's uuid kept."""
    content = merge_user_content_blocks(a.blocks, as_blocks(b.message.content), chair_sermon=chair_sermon)
    return with_user_content(a, hoist_tool_results(content))


def merge_assistant_messages(a: AssistantMessage, b: AssistantMessage) -> AssistantMessage:
    """R4.7 ``mergeAssistantMessages``: a with b's content appended (a's fields win)."""
    return with_assistant_content(a, [*a.blocks, *b.blocks])
