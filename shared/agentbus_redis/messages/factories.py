"""Message factories (§2): the only place messages get ids and timestamps.

Every factory takes ``clock`` and ``ids`` keyword arguments (defaults: the system clock and random
v4 UUIDs) so tests and replays are deterministic.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.constants import (
    CANCEL_MESSAGE,
    COMPACT_BOUNDARY_CONTENT,
    INTERRUPT_MESSAGE,
    INTERRUPT_MESSAGE_FOR_TOOL_USE,
    LOCAL_COMMAND_CAVEAT,
    NO_CONTENT_MESSAGE,
    SYNTHETIC_MESSAGES,
    SYNTHETIC_MODEL,
)
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AssistantPayload,
    AttachmentMessage,
    Message,
    ProgressMessage,
    ToolUseSummaryMessage,
    UserMessage,
    UserPayload,
)
from agentbus_redis.messages.system import (
    CompactBoundarySystemMessage,
    InformationalSystemMessage,
    LocalCommandSystemMessage,
)
from agentbus_redis.wire import field_or_none


def _synthetic_usage() -> JsonObject:
    """R2.3a: the zero usage of a synthetic assistant message."""
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": None,
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "inference_geo": None,
        "iterations": None,
        "speed": None,
    }


def create_user_message(
    content: str | Sequence[ContentBlock],
    *,
    uuid: str | None = None,
    timestamp: str | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
    **fields: JsonValue,
) -> UserMessage:
    """R2.2a/b: ``""`` becomes ``(no content)``; an empty list stays ``[]``; strings stay strings.

    ``fields`` are optional flags by attribute name (``is_meta=True``, ``tool_use_result=...``,
    ``source_tool_assistant_uuid=...``); fields left out are absent on the wire.
    """
    stored: str | list[ContentBlock] = (content or NO_CONTENT_MESSAGE) if isinstance(content, str) else list(content)
    set_fields = {name: value for name, value in fields.items() if value is not None}
    return UserMessage(
        type="user",
        message=UserPayload(role="user", content=stored),
        uuid=uuid or ids(),
        timestamp=timestamp if timestamp is not None else clock(),
        **set_fields,
    )


def create_user_interruption_message(
    *, tool_use: bool, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> UserMessage:
    """R2.2c: the interrupt text in array form, not meta."""
    text = INTERRUPT_MESSAGE_FOR_TOOL_USE if tool_use else INTERRUPT_MESSAGE
    return create_user_message([TextBlock(type="text", text=text)], clock=clock, ids=ids)


def create_tool_result_stop_message(tool_use_id: str) -> ToolResultBlock:
    """R2.2d: a bare is_error tool_result carrying CANCEL_MESSAGE."""
    return ToolResultBlock(type="tool_result", content=CANCEL_MESSAGE, is_error=True, tool_use_id=tool_use_id)


def prepare_user_content(text: str, preceding_blocks: Sequence[ContentBlock]) -> str | list[ContentBlock]:
    """R2.2e: the raw string, or the preceding blocks followed by a text block."""
    if not preceding_blocks:
        return text
    return [*preceding_blocks, TextBlock(type="text", text=text)]


def create_model_switch_breadcrumbs(
    arg: str, display: str, *, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> list[UserMessage]:
    """R2.2f: caveat (meta), the /model command tags, and its stdout."""
    indent = " " * 12
    command = (
        f"<command-name>/model</command-name>\n{indent}<command-message>model</command-message>\n"
        f"{indent}<command-args>{arg}</command-args>"
    )
    return [
        create_user_message(LOCAL_COMMAND_CAVEAT, is_meta=True, clock=clock, ids=ids),
        create_user_message(command, clock=clock, ids=ids),
        create_user_message(
            f"<local-command-stdout>Set model to {display}</local-command-stdout>", clock=clock, ids=ids
        ),
    ]


def create_assistant_message(
    content: str | Sequence[ContentBlock],
    *,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
    is_api_error_message: bool = False,
    **fields: JsonValue,
) -> AssistantMessage:
    """R2.3a/b: a synthetic assistant message (model ``<synthetic>``); a string becomes one text block,
    ``""`` becomes ``(no content)``; a list is used verbatim."""
    blocks: list[ContentBlock] = (
        [TextBlock(type="text", text=content or NO_CONTENT_MESSAGE)] if isinstance(content, str) else list(content)
    )
    payload = AssistantPayload(
        id=ids(),
        type="message",
        role="assistant",
        model=SYNTHETIC_MODEL,
        content=blocks,
        stop_reason="stop_sequence",
        stop_sequence="",
        usage=_synthetic_usage(),
        container=None,
        context_management=None,
    )
    set_fields = {name: value for name, value in fields.items() if value is not None}
    return AssistantMessage(
        type="assistant",
        message=payload,
        uuid=ids(),
        timestamp=clock(),
        is_api_error_message=is_api_error_message,
        **set_fields,
    )


def create_assistant_api_error_message(
    content: str,
    *,
    api_error: str | None = None,
    error: str | None = None,
    error_details: str | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> AssistantMessage:
    """R2.3c: the synthetic API error assistant message."""
    return create_assistant_message(
        content,
        clock=clock,
        ids=ids,
        is_api_error_message=True,
        api_error=api_error,
        error=error,
        error_details=error_details,
    )


def create_progress_message(
    *,
    tool_use_id: str,
    parent_tool_use_id: str,
    data: JsonObject,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> ProgressMessage:
    """R2.4a / R1.6."""
    return ProgressMessage(
        type="progress",
        data=data,
        tool_use_id=tool_use_id,
        parent_tool_use_id=parent_tool_use_id,
        uuid=ids(),
        timestamp=clock(),
    )


def create_attachment_message(
    attachment: JsonObject, *, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> AttachmentMessage:
    """R2.4a / R1.5: ``{type:"attachment", attachment, uuid, timestamp}`` and nothing else."""
    return AttachmentMessage(type="attachment", attachment=attachment, uuid=ids(), timestamp=clock())


def create_tool_use_summary_message(
    summary: str,
    preceding_tool_use_ids: Sequence[str],
    *,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> ToolUseSummaryMessage:
    """R2.4a / R1.7."""
    return ToolUseSummaryMessage(
        type="tool_use_summary",
        summary=summary,
        preceding_tool_use_ids=list(preceding_tool_use_ids),
        uuid=ids(),
        timestamp=clock(),
    )


def create_informational_message(
    content: str,
    *,
    level: str = "info",
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
    **fields: JsonValue,
) -> InformationalSystemMessage:
    """§1.4 ``informational``; ``prevent_continuation`` is only present when true."""
    set_fields = {name: value for name, value in fields.items() if value}
    return InformationalSystemMessage(
        type="system",
        subtype="informational",
        content=content,
        is_meta=False,
        level=level,
        uuid=ids(),
        timestamp=clock(),
        **set_fields,
    )


def create_local_command_message(
    content: str, *, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> LocalCommandSystemMessage:
    """§1.4 ``local_command``: command input/output text, sent to the model (R4.5)."""
    return LocalCommandSystemMessage(
        type="system",
        subtype="local_command",
        content=content,
        level="info",
        is_meta=False,
        uuid=ids(),
        timestamp=clock(),
    )


def create_compact_boundary_message(
    trigger: str,
    pre_tokens: int,
    *,
    last_pre_compact_uuid: str | None = None,
    user_context: str | None = None,
    messages_summarized: int | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> CompactBoundarySystemMessage:
    """R2.4b: ``logicalParentUuid`` is set only when the last pre-compact uuid is given."""
    metadata: JsonObject = {"trigger": trigger, "preTokens": pre_tokens}
    if user_context is not None:
        metadata["userContext"] = user_context
    if messages_summarized is not None:
        metadata["messagesSummarized"] = messages_summarized
    extra: dict[str, JsonValue] = {}
    if last_pre_compact_uuid:
        extra["logical_parent_uuid"] = last_pre_compact_uuid
    return CompactBoundarySystemMessage(
        type="system",
        subtype="compact_boundary",
        content=COMPACT_BOUNDARY_CONTENT,
        is_meta=False,
        level="info",
        compact_metadata=metadata,
        uuid=ids(),
        timestamp=clock(),
        **extra,
    )


def annotate_boundary_with_preserved_segment(
    boundary: CompactBoundarySystemMessage, anchor_uuid: str, keep: Sequence[Message]
) -> CompactBoundarySystemMessage:
    """R2.4b: record ``preservedSegment = {headUuid, anchorUuid, tailUuid}`` when ``keep`` is non-empty."""
    kept_uuids = [uuid for uuid in (field_or_none(message, "uuid") for message in keep) if isinstance(uuid, str)]
    if not kept_uuids:
        return boundary
    metadata = dict(boundary.compact_metadata or {})
    metadata["preservedSegment"] = {
        "headUuid": kept_uuids[0],
        "anchorUuid": anchor_uuid,
        "tailUuid": kept_uuids[-1],
    }
    return boundary.model_copy(update={"compact_metadata": metadata})


def derive_uuid(parent: str, index: int) -> str:
    """R3.1: the first 24 characters of ``parent`` plus ``index`` as 12 lowercase hex digits."""
    return f"{parent[:24]}{index:012x}"


def derive_short_message_id(uuid: str) -> str:
    """R2.4d: first 10 hex digits of the dash-less uuid, as base 36, first 6 characters."""
    value = int(uuid.replace("-", "")[:10], 16)
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    rendered = ""
    while True:
        value, remainder = divmod(value, 36)
        rendered = digits[remainder] + rendered
        if value == 0:
            break
    return rendered[:6]


def is_synthetic_message(message: Message) -> bool:
    """R2.1c: a user/assistant message whose first block is text exactly equal to a synthetic constant."""
    if not isinstance(message, UserMessage | AssistantMessage):
        return False
    content = message.message.content
    if isinstance(content, str) or not content:
        return False
    first = content[0]
    return isinstance(first, TextBlock) and first.text in SYNTHETIC_MESSAGES


def is_synthetic_api_error(message: Message) -> bool:
    """R2.3c: assistant ∧ ``isApiErrorMessage`` ∧ model ``<synthetic>``."""
    return (
        isinstance(message, AssistantMessage)
        and message.is_api_error_message is True
        and message.message.model == SYNTHETIC_MODEL
    )
