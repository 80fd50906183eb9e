"""The UI projection of a conversation (§3, §5.1–5.2): split into one message per block, hide what the
terminal never shows, and move tool results and tool hooks next to their tool_use.

Everything here is display-only: nothing produced by this module may feed the API path (§11 stage 7),
because :func:`normalize_messages` derives new uuids and drops fields the API path relies on.

Field policy of :func:`normalize_messages` (R3.2), decided to match Claude Code byte for byte:
Claude Code builds *new* objects for split assistant messages and for array-content user messages, listing
only the kept fields. So on those messages everything else is absent in the output: the transcript envelope
(``parentUuid``, ``sessionId``, ``cwd``, …), fields of newer Claude Code versions that agentbus keeps as
extras, and (for users) the extras of ``message`` itself. A user message with *string* content is
copied whole (Claude Code spreads it), so it keeps its envelope and extras. Consumers that need the
envelope in the UI look it up by the original uuid (the first 24 characters survive :func:`derive_uuid`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from agentbus_redis.messages.constants import INTERRUPT_MESSAGE_FOR_TOOL_USE, NO_CONTENT_MESSAGE
from agentbus_redis.messages.content import (
    ServerToolUseBlock,
    TextBlock,
    ToolUseBlock,
    carries_tool_use_id,
    tool_use_id_of,
)
from agentbus_redis.messages.factories import derive_uuid
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, UserMessage, UserPayload

_ASSISTANT_KEPT_FIELDS = ("is_meta", "is_virtual", "request_id", "error", "is_api_error_message", "advisor_model")
"""R3.2 (2): besides type, uuid, timestamp and message."""

_USER_KEPT_FIELDS = ("tool_use_result", "mcp_meta", "is_meta", "is_visible_in_transcript_only", "is_virtual", "origin")
"""R3.2 (4): besides type, uuid, timestamp, message and the per-image imagePasteIds."""

HOOK_ATTACHMENT_TYPES = frozenset(
    {
        "hook_blocking_error",
        "hook_cancelled",
        "hook_error_during_execution",
        "hook_non_blocking_error",
        "hook_success",
        "hook_system_message",
        "hook_additional_context",
        "hook_stopped_continuation",
    }
)
"""R5.1 (1): the attachment kinds grouped with their tool_use."""


def _set_fields(source: AssistantMessage | UserMessage, names: Iterable[str]) -> dict[str, object]:
    """The listed fields that are present on ``source`` (absent stays absent, an explicit null stays null)."""
    present = source.model_fields_set
    return {name: getattr(source, name) for name in names if name in present}


def _split_assistant(message: AssistantMessage, is_new_chain: bool) -> list[Message]:
    """R3.2 (2): one new assistant message per block with only the kept fields."""
    result: list[Message] = []
    kept = _set_fields(message, _ASSISTANT_KEPT_FIELDS)
    for index, block in enumerate(message.blocks):
        payload = message.message.model_copy(
            update={"content": [block], "context_management": message.message.context_management}
        )
        result.append(
            AssistantMessage(
                type="assistant",
                timestamp=message.timestamp,
                message=payload,
                uuid=derive_uuid(message.uuid, index) if is_new_chain else message.uuid,
                **kept,
            )
        )
    return result


def _split_user(message: UserMessage, is_new_chain: bool) -> list[Message]:
    """R3.2 (4): one new user message per block; the k-th image keeps the k-th paste id."""
    kept = _set_fields(message, _USER_KEPT_FIELDS)
    paste_ids = message.image_paste_ids
    image_index = 0
    result: list[Message] = []
    for index, block in enumerate(message.blocks):
        image_ids: dict[str, object] = {}
        if block.type == "image":
            if paste_ids is not None and image_index < len(paste_ids):
                image_ids["image_paste_ids"] = [paste_ids[image_index]]
            image_index += 1
        result.append(
            UserMessage(
                type="user",
                message=UserPayload(role="user", content=[block]),
                uuid=derive_uuid(message.uuid, index) if is_new_chain else message.uuid,
                timestamp=message.timestamp,
                **kept,
                **image_ids,
            )
        )
    return result


def normalize_messages(messages: Sequence[Message]) -> list[Message]:
    """R3.2: one message per content block, for the UI only.

    ``isNewChain`` starts false and, once a multi-block user/assistant message is met, stays true: from
    then on every user/assistant uuid is re-derived (``derive_uuid(orig, i)``), including single-block
    and string messages. A string user message becomes one text block, keeps all its fields and never
    flips the flag. Messages with ``[]`` content produce nothing. Attachment, progress and system
    messages (and, should they appear, control messages) pass through unchanged. An assistant whose
    ``content`` is a legacy string is treated as one text block.
    """
    is_new_chain = False
    result: list[Message] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            is_new_chain = is_new_chain or len(message.blocks) > 1
            result.extend(_split_assistant(message, is_new_chain))
        elif isinstance(message, UserMessage) and isinstance(message.message.content, str):
            text_payload = message.message.model_copy(update={"content": [TextBlock(text=message.message.content)]})
            uuid = derive_uuid(message.uuid, 0) if is_new_chain else message.uuid
            result.append(message.model_copy(update={"uuid": uuid, "message": text_payload}))
        elif isinstance(message, UserMessage):
            is_new_chain = is_new_chain or len(message.blocks) > 1
            result.extend(_split_user(message, is_new_chain))
        else:
            result.append(message)
    return result


def is_not_empty_message(message: Message) -> bool:
    """R3.3: the UI emptiness filter applied after :func:`normalize_messages`."""
    if not isinstance(message, UserMessage | AssistantMessage):
        return True
    content = message.message.content
    if isinstance(content, str):
        return bool(content.strip())
    if not content:
        return False
    if len(content) > 1:
        return True
    block = content[0]
    if block.type != "text":
        return True
    # A malformed text block (no ``text``) kept as UnknownBlock counts as blank.
    text = block.text if isinstance(block, TextBlock) else ""
    return bool(text.strip()) and text not in (NO_CONTENT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE)


def messages_after_compact_boundary(messages: Sequence[Message]) -> list[Message]:
    """R3.4: the messages from the last ``compact_boundary`` on (the boundary included); all when none."""
    for index in range(len(messages) - 1, -1, -1):
        if _is_system(messages[index], "compact_boundary"):
            return list(messages[index:])
    return list(messages)


def should_show_user_message(message: Message, *, transcript_mode: bool, channels_visible: bool = False) -> bool:
    """R3.4: hide meta user messages (channel-origin ones stay visible only when the gated KAIROS
    channels feature is on, ``channels_visible``) and transcript-only ones outside transcript mode."""
    if not isinstance(message, UserMessage):
        return True
    if message.is_meta:
        origin = message.origin
        return channels_visible and isinstance(origin, dict) and origin.get("kind") == "channel"
    return not (message.is_visible_in_transcript_only and not transcript_mode)


def ui_messages(
    messages: Sequence[Message],
    *,
    transcript_mode: bool = False,
    verbose: bool = False,
    fullscreen: bool = False,
    channels_visible: bool = False,
    synthetic_streaming_tool_uses: Sequence[Message] = (),
) -> list[Message]:
    """R3.4 as far as the spec defines it: normalize → drop empty → from the last compact boundary on
    (unless verbose or fullscreen) → drop progress → :func:`should_show_user_message` →
    :func:`reorder_messages_in_ui`. Claude Code also drops attachments whose renderer draws nothing
    before the user filter; that renderer-specific list is not in the spec and is not applied here,
    nor is the grouping/collapsing that follows the reorder."""
    shown = [message for message in normalize_messages(messages) if is_not_empty_message(message)]
    if not (verbose or fullscreen):
        shown = messages_after_compact_boundary(shown)
    shown = [
        message
        for message in shown
        if message.type != "progress"
        and should_show_user_message(message, transcript_mode=transcript_mode, channels_visible=channels_visible)
    ]
    return reorder_messages_in_ui(shown, synthetic_streaming_tool_uses)


def _is_system(message: Message, subtype: str) -> bool:
    return message.type == "system" and getattr(message, "subtype", None) == subtype


def _hook_event(message: Message) -> tuple[str, str | None] | None:
    """``(hookEvent, toolUseID)`` of a hook attachment; None for anything else (R5.1 (1))."""
    if not isinstance(message, AttachmentMessage) or message.attachment_type not in HOOK_ATTACHMENT_TYPES:
        return None
    event = message.attachment.get("hookEvent")
    tool_use_id = message.attachment.get("toolUseID")
    return (event if isinstance(event, str) else "", tool_use_id if isinstance(tool_use_id, str) else None)


def _tool_use_request_id(message: Message) -> tuple[bool, str | None]:
    """Whether ``message`` is a tool-use request (an assistant holding any tool_use) and its key: the id
    of its first block. Claude Code drops a request without a usable id from the UI list."""
    if not isinstance(message, AssistantMessage):
        return False, None
    blocks = message.blocks
    if not any(block.type == "tool_use" for block in blocks):
        return False, None
    first_id = getattr(blocks[0], "id", None)
    return True, first_id if isinstance(first_id, str) and first_id else None


def _tool_result_id(message: Message) -> tuple[bool, str | None]:
    """Whether ``message`` is a user message whose first block is a tool_result, and the id it answers."""
    if not isinstance(message, UserMessage) or isinstance(message.message.content, str) or not message.blocks:
        return False, None
    first = message.blocks[0]
    return first.type == "tool_result", tool_use_id_of(first)


@dataclass
class _ToolUseGroup:
    tool_use: Message | None = None
    pre_hooks: list[Message] = field(default_factory=list)
    tool_result: Message | None = None
    post_hooks: list[Message] = field(default_factory=list)


def reorder_messages_in_ui(
    normalized: Sequence[Message], synthetic_streaming_tool_uses: Sequence[Message] = ()
) -> list[Message]:
    """R5.1: put each tool_use, its PreToolUse hooks, its result and its PostToolUse hooks together.

    Pass 1 groups by tool_use id (a later request or result with the same id replaces an earlier one);
    pass 2 emits the group where its tool_use first stood and skips results/hooks where they stood, so
    results or hooks whose tool_use is absent are not shown. Consecutive ``api_error`` system messages
    keep only the newest; the synthetic streaming tool uses go last; finally every ``api_error`` except
    one that is the very last element is removed. O(n).
    """
    groups: dict[str | None, _ToolUseGroup] = {}
    for message in normalized:
        is_request, request_id = _tool_use_request_id(message)
        if is_request:
            if request_id is not None:
                groups.setdefault(request_id, _ToolUseGroup()).tool_use = message
            continue
        hook = _hook_event(message)
        if hook is not None and hook[0] == "PreToolUse":
            groups.setdefault(hook[1], _ToolUseGroup()).pre_hooks.append(message)
            continue
        is_result, result_id = _tool_result_id(message)
        if is_result:
            groups.setdefault(result_id, _ToolUseGroup()).tool_result = message
            continue
        if hook is not None and hook[0] == "PostToolUse":
            groups.setdefault(hook[1], _ToolUseGroup()).post_hooks.append(message)

    result: list[Message] = []
    emitted: set[str] = set()
    for message in normalized:
        is_request, request_id = _tool_use_request_id(message)
        if is_request:
            if request_id is not None and request_id not in emitted:
                emitted.add(request_id)
                group = groups[request_id]
                if group.tool_use is not None:
                    result.append(group.tool_use)
                    result.extend(group.pre_hooks)
                    if group.tool_result is not None:
                        result.append(group.tool_result)
                    result.extend(group.post_hooks)
            continue
        hook = _hook_event(message)
        if (hook is not None and hook[0] in ("PreToolUse", "PostToolUse")) or _tool_result_id(message)[0]:
            continue
        if _is_system(message, "api_error") and result and _is_system(result[-1], "api_error"):
            result[-1] = message
            continue
        result.append(message)

    result.extend(synthetic_streaming_tool_uses)
    last = result[-1] if result else None
    return [message for message in result if not _is_system(message, "api_error") or message is last]


def sibling_tool_use_ids(messages: Sequence[Message]) -> dict[str, frozenset[str]]:
    """R5.2: for every tool_use id, the tool_use ids of all assistant messages sharing its API
    ``message.id`` (the parallel calls of one response, split by R9.4). Assistants without an id share
    one group, as in Claude Code; if one tool_use id appears under two message ids, the later wins."""
    ids_by_message: dict[str | None, set[str]] = {}
    message_of_tool_use: dict[str, str | None] = {}
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        group = ids_by_message.setdefault(message.message.id, set())
        for block in message.blocks:
            if isinstance(block, ToolUseBlock):
                group.add(block.id)
                message_of_tool_use[block.id] = message.message.id
    frozen = {message_id: frozenset(group) for message_id, group in ids_by_message.items()}
    return {tool_use_id: frozen[message_id] for tool_use_id, message_id in message_of_tool_use.items()}


def _resolved_tool_use_ids(messages: Sequence[Message]) -> set[str]:
    """Ids answered by a user tool_result or by any assistant block carrying a ``tool_use_id`` (R1.8)."""
    resolved: set[str] = set()
    for message in messages:
        if not isinstance(message, UserMessage | AssistantMessage):
            continue
        for block in message.blocks:
            if message.type == "user" and block.type != "tool_result":
                continue
            if message.type == "assistant" and not carries_tool_use_id(block):
                continue
            answered = tool_use_id_of(block)
            if answered is not None:
                resolved.add(answered)
    return resolved


def errored_server_tool_uses(messages: Sequence[Message]) -> frozenset[str]:
    """R5.2: ids of ``server_tool_use``/``mcp_tool_use`` blocks that no result answers, skipping the
    blocks of the last message when it is an assistant (its response may still be streaming; every
    split message with the same API ``message.id`` is skipped). Pass the list the UI shows."""
    resolved = _resolved_tool_use_ids(messages)
    last = messages[-1] if messages else None
    in_flight: tuple[bool, str | None] = (
        (True, last.message.id) if isinstance(last, AssistantMessage) else (False, None)
    )
    errored: set[str] = set()
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        if in_flight[0] and message.message.id == in_flight[1]:
            continue
        for block in message.blocks:
            if isinstance(block, ServerToolUseBlock) and block.id not in resolved:
                resolved.add(block.id)
                errored.add(block.id)
    return frozenset(errored)
