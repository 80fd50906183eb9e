"""The message model (§1): user, assistant, system (every subtype), progress, attachment, and the
control kinds tombstone, stream_event, stream_request_start and tool_use_summary.

Wire names are Claude Code's camelCase JSONL (``parentUuid``, ``toolUseResult``,
``sourceToolAssistantUUID``); the embedded ``message`` objects are the Anthropic API's snake_case.
Stored kinds also carry the optional transcript envelope (R7.3) so a JSONL line is one model.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import AfterValidator, BeforeValidator, Field, SerializeAsAny, TypeAdapter

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import ContentBlock, as_blocks
from agentbus_redis.messages.envelope import StoredMessageBase
from agentbus_redis.messages.system import (
    SYSTEM_SUBTYPE_TAGS,
    KnownSystemMessage,
    OtherSystemMessage,
    SystemMessage,
)
from agentbus_redis.wire import CamelModel, WireModel, only_routed_to


class UserPayload(WireModel):
    """The API-shaped ``message`` of a user line."""

    role: Literal["user"] = "user"
    content: str | list[ContentBlock]

    # Older and hand-made transcripts omit ``role``; a factory passes it explicitly.
    _always_dumped: ClassVar[frozenset[str]] = frozenset()


class AssistantPayload(WireModel):
    """The full Anthropic Message object of an assistant line (R1.3)."""

    id: str | None = None
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str = ""
    content: str | list[ContentBlock]
    """Always a list from the API; some old/hand-made transcripts store a string."""
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: JsonObject | None = None
    container: JsonValue = None
    context_management: JsonValue = None

    _always_dumped: ClassVar[frozenset[str]] = frozenset()


class UserMessage(StoredMessageBase):
    """R1.2 / §1.2."""

    type: Literal["user"] = "user"
    message: UserPayload
    is_meta: bool | None = None
    is_visible_in_transcript_only: bool | None = None
    is_virtual: bool | None = None
    is_compact_summary: bool | None = None
    summarize_metadata: JsonObject | None = None
    tool_use_result: JsonValue = None
    mcp_meta: JsonObject | None = None
    image_paste_ids: list[int] | None = None
    source_tool_assistant_uuid: str | None = Field(default=None, alias="sourceToolAssistantUUID")
    source_tool_use_id: str | None = Field(default=None, alias="sourceToolUseID")
    permission_mode: str | None = None
    origin: JsonValue = None

    @property
    def blocks(self) -> list[ContentBlock]:
        """The content as a block list (a string becomes one text block)."""
        return as_blocks(self.message.content)


class AssistantMessage(StoredMessageBase):
    """§1.3. ``uuid``/``timestamp`` are local ids, not the API message id."""

    type: Literal["assistant"] = "assistant"
    message: AssistantPayload
    request_id: str | None = None
    is_api_error_message: bool | None = None
    api_error: JsonValue = None
    error: JsonValue = None
    error_details: JsonValue = None
    is_virtual: bool | None = None
    is_meta: bool | None = None
    advisor_model: str | None = None
    research: JsonValue = None

    @property
    def blocks(self) -> list[ContentBlock]:
        """The content as a block list (a stored string becomes one text block)."""
        return as_blocks(self.message.content)

    @property
    def api_message_id(self) -> str | None:
        """The API ``message.id`` shared by every line split from one response (R9.4)."""
        return self.message.id


class ProgressMessage(StoredMessageBase):
    """R1.6: tool progress; never sent to the API, never persisted by current Claude Code."""

    type: Literal["progress"] = "progress"
    data: JsonObject
    tool_use_id: str | None = Field(default=None, alias="toolUseID")
    parent_tool_use_id: str | None = Field(default=None, alias="parentToolUseID")


class AttachmentMessage(StoredMessageBase):
    """R1.5: ``attachment`` is ``{type, ...}`` with ~55 kinds; kept as free JSON."""

    type: Literal["attachment"] = "attachment"
    attachment: JsonObject

    @property
    def attachment_type(self) -> str:
        kind = self.attachment.get("type")
        return kind if isinstance(kind, str) else ""


class TombstoneMessage(CamelModel):
    """R1.7: retracts ``message`` (removed from the conversation and the transcript, R6.3)."""

    type: Literal["tombstone"] = "tombstone"
    message: Message


class StreamEventMessage(CamelModel):
    """R1.7: a raw SSE event passed through; ``ttftMs`` only on ``message_start``."""

    type: Literal["stream_event"] = "stream_event"
    event: JsonObject
    ttft_ms: float | None = None


class StreamRequestStartMessage(CamelModel):
    """R1.7: yielded before every model call."""

    type: Literal["stream_request_start"] = "stream_request_start"


class ToolUseSummaryMessage(CamelModel):
    """R1.7: SDK-only summary of a tool batch."""

    type: Literal["tool_use_summary"] = "tool_use_summary"
    summary: str
    preceding_tool_use_ids: list[str]
    uuid: str
    timestamp: str


def _message_tag(value: Any) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind == "system":
        subtype = value.get("subtype") if isinstance(value, dict) else getattr(value, "subtype", None)
        return SYSTEM_SUBTYPE_TAGS.get(subtype, "system:other") if isinstance(subtype, str) else "system:other"
    return kind if isinstance(kind, str) else "invalid"


_KnownSystemMessage = Annotated[KnownSystemMessage, Field(discriminator="subtype")]


def _one_choice(message: SystemMessage) -> SystemMessage:
    """Identity: wrapping the system union in a validator keeps it *one* ``system`` choice of the
    outer ``type`` union (pydantic flattens a bare union into it and would then find two models for
    ``system``)."""
    return message


# Unknown subtypes, and a missing or non-string one, go to OtherSystemMessage (as ``_message_tag``
# routes them); a known subtype that fails its own model stays an error.
SystemMessageChoice = Annotated[
    _KnownSystemMessage | Annotated[OtherSystemMessage, BeforeValidator(only_routed_to("system:other", _message_tag))],
    Field(union_mode="left_to_right"),
    AfterValidator(_one_choice),
]
"""Any system message, discriminated on ``subtype`` (validation only; the static type is :data:`SystemMessage`)."""

# Literal discriminators are looked up in Rust: validating a valid message (``validate_json`` above all)
# calls no Python except the no-op ``_one_choice`` of system messages; the fallback guards run only
# after their tagged branch failed.
Message = Annotated[
    UserMessage
    | AssistantMessage
    | SystemMessageChoice
    | ProgressMessage
    | AttachmentMessage
    | TombstoneMessage
    | StreamEventMessage
    | StreamRequestStartMessage
    | ToolUseSummaryMessage,
    Field(discriminator="type"),
    SerializeAsAny(),  # dumped by the value's own model (see wire.py)
]
"""Any message or control message (R1.1), discriminated on ``type`` (and ``subtype`` for system)."""

TombstoneMessage.model_rebuild()

MESSAGE_ADAPTER: TypeAdapter[Message] = TypeAdapter(Message)

StoredMessage = UserMessage | AssistantMessage | SystemMessage | ProgressMessage | AttachmentMessage
"""The persisted/renderable kinds (R1.1)."""

ApiMessage = UserMessage | AssistantMessage
"""The kinds that reach the Messages API."""

STORED_TYPES = frozenset({"user", "assistant", "system", "progress", "attachment"})
CONTROL_TYPES = frozenset({"tombstone", "stream_event", "stream_request_start", "tool_use_summary"})


def parse_message(data: JsonObject) -> Message:
    """Validate one wire message object (raises ``pydantic.ValidationError`` with the failing location)."""
    return MESSAGE_ADAPTER.validate_python(data, by_alias=True, by_name=False)


def dump_message(message: Message) -> JsonObject:
    """The wire JSON of ``message``; absent fields stay absent."""
    return message.to_wire()
