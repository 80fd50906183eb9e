"""pi's messages (P1, P4.2): the LLM union ``user`` / ``assistant`` / ``toolResult`` and the coding
agent's own kinds (``bashExecution``, ``custom``, and the context-only ``branchSummary`` /
``compactionSummary``), discriminated on ``role``. A role this module does not know is kept verbatim as
:class:`PiOtherMessage` (P1.6: readers tolerate what a newer pi writes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, SerializeAsAny, Tag, TypeAdapter

from agentbus_redis.json_types import JsonValue
from agentbus_redis.pi.constants import FAILED_STOP_REASONS
from agentbus_redis.pi.content import PiBlock, PiToolCall
from agentbus_redis.pi.routing import present, tag_router
from agentbus_redis.wire import CamelModel

Number = int | float
"""JSON numbers as pi wrote them (an integral value stays an ``int``, so it is written back without ``.0``)."""


class PiCost(CamelModel):
    """P3.1: USD per usage field (recomputed from a price table, P3.4)."""

    input: Number = 0
    output: Number = 0
    cache_read: Number = 0
    cache_write: Number = 0
    total: Number = 0


class PiUsage(CamelModel):
    """P3.1; every number defaults to 0 (P1.6, P3.6: old files lack ``totalTokens``, some lack ``cost``)."""

    input: int = 0
    output: int = 0
    cache_read: int = 0
    cache_write: int = 0
    total_tokens: int = 0
    cost: PiCost | None = None

    def context_tokens(self) -> int:
        """P3.5: ``totalTokens``, or the sum when it is missing or zero."""
        return self.total_tokens or (self.input + self.output + self.cache_read + self.cache_write)


class PiUserMessage(CamelModel):
    """P1.2: string shorthand or text/image blocks."""

    role: Literal["user"] = "user"
    content: str | list[PiBlock]
    timestamp: Number | None = None


class PiAssistantMessage(CamelModel):
    """P1.3: one message per API response, every block of it."""

    role: Literal["assistant"] = "assistant"
    content: list[PiBlock]
    api: str | None = None
    provider: str | None = None
    model: str | None = None
    usage: PiUsage | None = None
    stop_reason: str | None = None
    error_message: str | None = None
    timestamp: Number | None = None

    @property
    def failed(self) -> bool:
        """P3.9: ``error`` and ``aborted`` turns end the run; their tool calls never run."""
        return self.stop_reason in FAILED_STOP_REASONS

    def tool_calls(self) -> list[PiToolCall]:
        return [block for block in self.content if isinstance(block, PiToolCall)]


class PiToolResultMessage(CamelModel):
    """P1.4: one per tool call; ``details`` is never sent to the model."""

    role: Literal["toolResult"] = "toolResult"
    tool_call_id: str
    tool_name: str | None = None
    content: str | list[PiBlock]
    details: JsonValue = None
    is_error: bool | None = None
    timestamp: Number | None = None


class PiBashExecution(CamelModel):
    """P4.2: a user ``!cmd`` shell escape (``!!cmd`` sets ``excludeFromContext``)."""

    role: Literal["bashExecution"] = "bashExecution"
    command: str
    output: str = ""
    exit_code: int | None = None
    cancelled: bool | None = None
    truncated: bool | None = None
    full_output_path: str | None = None
    timestamp: Number | None = None
    exclude_from_context: bool | None = None


class PiCustomMessage(CamelModel):
    """P4.2: an extension's message (``hookMessage`` before v3, P7.11); sent as a user message."""

    role: Literal["custom"] = "custom"
    custom_type: str | None = None
    content: str | list[PiBlock]
    display: bool | None = None
    details: JsonValue = None
    timestamp: Number | None = None


class PiBranchSummary(CamelModel):
    """P4.2 / P8.4: exists only in a rebuilt context (from a ``branch_summary`` entry)."""

    role: Literal["branchSummary"] = "branchSummary"
    summary: str
    from_id: str | None = None
    timestamp: Number | None = None


class PiCompactionSummary(CamelModel):
    """P4.2 / P8.6: exists only in a rebuilt context (from the last ``compaction`` entry on the path)."""

    role: Literal["compactionSummary"] = "compactionSummary"
    summary: str
    tokens_before: Number | None = None
    timestamp: Number | None = None


class PiOtherMessage(CamelModel):
    """A role this module does not model (``hookMessage`` of an unmigrated v2 file, a newer pi's kinds),
    or a known role missing a required field: kept verbatim, dropped by ``convertToLlm`` (P4.3)."""

    role: str | None = None


_message_tag = tag_router(
    "role",
    {
        "user": {"content": present},
        "assistant": {"content": present},
        "toolResult": {"toolCallId": present, "content": present},
        "bashExecution": {"command": present},
        "custom": {"content": present},
        "branchSummary": {"summary": present},
        "compactionSummary": {"summary": present},
    },
    "other",
    PiOtherMessage,
)


PiMessage = Annotated[
    Annotated[PiUserMessage, Tag("user")]
    | Annotated[PiAssistantMessage, Tag("assistant")]
    | Annotated[PiToolResultMessage, Tag("toolResult")]
    | Annotated[PiBashExecution, Tag("bashExecution")]
    | Annotated[PiCustomMessage, Tag("custom")]
    | Annotated[PiBranchSummary, Tag("branchSummary")]
    | Annotated[PiCompactionSummary, Tag("compactionSummary")]
    | Annotated[PiOtherMessage, Tag("other")],
    Discriminator(_message_tag),
    SerializeAsAny(),
]
"""Any AgentMessage (P4.1) pi stores or rebuilds."""

PiLlmMessage = PiUserMessage | PiAssistantMessage | PiToolResultMessage
"""P1.1: what ``convertToLlm`` hands to a provider."""

PI_MESSAGE_ADAPTER: TypeAdapter[PiMessage] = TypeAdapter(PiMessage)
"""Validates a pi message's wire object (``by_alias=True, by_name=False``)."""
