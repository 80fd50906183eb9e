"""Bus events: what producers put on ingress, what ingestion writes to the canonical log, the tool
jobs it hands out and the request notices the normalizer publishes.

Every entry carries a schema version ``v`` and the session id; ingress entries also carry an
idempotency key so a producer's retry (or a tool worker re-running a reclaimed job) is applied once.
Bus formats are agentbus' own and snake_case; embedded messages keep Claude Code's camelCase wire form.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field, SerializeAsAny, TypeAdapter, field_validator

from agentbus_redis.approvals.records import ApprovalAnswer, ApprovalRequested
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import ContentBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, ProgressMessage, UserMessage
from agentbus_redis.pi.messages import PiMessage
from agentbus_redis.wire import WireModel


class BusModel(WireModel):
    """A versioned bus record: ``v`` is always written."""

    _always_dumped: ClassVar[frozenset[str]] = frozenset({"type", "v"})


SCHEMA_VERSION = 1
"""Version of every bus format below; a reader rejects entries of a version it does not know."""


class UserPrompt(WireModel):
    """A human (or SDK) prompt. ``uuid`` is optional: ingestion mints one when absent."""

    type: Literal["user_prompt"] = "user_prompt"
    content: str | list[ContentBlock]
    uuid: str | None = None
    timestamp: str | None = None
    is_meta: bool | None = None
    origin: JsonValue = None
    queued: bool | None = None
    """Logged only when the session's turn is over (held until then): bus/queued_prompts.py."""


class AssistantReply(WireModel):
    """A complete assistant message (non-streaming reply, or a recorded line). ``execute_tools`` is
    false when the results are supplied by the producer (replay of a recorded session)."""

    type: Literal["assistant_message"] = "assistant_message"
    message: AssistantMessage
    execute_tools: bool = True
    request_seq: int | None = None
    """Set by the model worker: the ``seq`` of the API request this reply answers. A reply to a request older
    than the session's last interrupt is dropped (the interrupt closed that turn, R10.1)."""


class StreamEvent(WireModel):
    """One raw Anthropic stream event of a reply in progress (R9)."""

    type: Literal["stream_event"] = "stream_event"
    request_id: str
    event: JsonObject
    execute_tools: bool = True
    request_seq: int | None = None
    """As :attr:`AssistantReply.request_seq`: a stream of a request older than the last interrupt is dropped."""
    max_tokens: int | None = None
    """The request's ``max_tokens`` (on the stream's first event): the ``max_tokens`` error quotes it (M8.3)."""
    withhold_stop_error: bool = False
    """M8.3–M8.5 (on the ``message_delta`` of a cut reply): the model worker recovers — a resumption, the
    ``max_tokens`` escalation, or the reply's tools run — so the loop withholds the ``max_output_tokens`` API
    error this event's stop reason brings (R9.5); it is logged only from the reply that exhausts them."""


class StreamFallback(WireModel):
    """The stream of ``request_id`` failed; its partial messages are tombstoned (R6.1, R9.9)."""

    type: Literal["stream_fallback"] = "stream_fallback"
    request_id: str


class SystemNotice(WireModel):
    """A system message: local_command output, API errors, compact boundaries, … (§1.4)."""

    type: Literal["system_message"] = "system_message"
    message: Message

    @field_validator("message")
    @classmethod
    def _must_be_system(cls, message: Message) -> Message:
        if message.type != "system":
            msg = f"system_message carries a {message.type!r} message"
            raise ValueError(msg)
        return message


class AttachmentNotice(WireModel):
    type: Literal["attachment"] = "attachment"
    message: AttachmentMessage


class Interrupt(WireModel):
    """The user pressed esc (``user_cancel``) or typed while tools run (``interrupt``, R8.9/R10.1)."""

    type: Literal["interrupt"] = "interrupt"
    reason: Literal["user_cancel", "interrupt"] = "user_cancel"


class ToolProgressReport(WireModel):
    """Progress of a running tool, from a tool worker (R8.3)."""

    type: Literal["tool_progress"] = "tool_progress"
    message: ProgressMessage


class ToolResultReport(WireModel):
    """A tool result message (exactly one tool_result for its id, R8.1), from a tool worker or a replay."""

    type: Literal["tool_result"] = "tool_result"
    message: UserMessage


class ToolJobAbandoned(WireModel):
    """A tool job was dead-lettered (its worker kept dying): its unanswered calls get the placeholder."""

    type: Literal["tool_job_abandoned"] = "tool_job_abandoned"
    assistant_uuid: str
    tool_use_ids: list[str]
    reason: str


class DeadlineSweep(WireModel):
    """Internal tick (written by the ingestion worker's sweeper into the session's own ingress shard, so
    it is applied in order by the shard owner): answer calls whose deadline has passed."""

    type: Literal["deadline_sweep"] = "deadline_sweep"
    now_ms: int


class StuckTurnSweep(WireModel):
    """Internal tick (written by the ingestion worker's stuck-turn sweeper into the session's own ingress shard):
    end the session's turn if, applied in order, it is still stuck at ``now_ms`` (bus/stuck_turns.py)."""

    type: Literal["stuck_turn_sweep"] = "stuck_turn_sweep"
    now_ms: int


class RecordedMessage(WireModel):
    """Any other recorded message replayed verbatim (e.g. an isMeta user line, a summary user line).

    ``replayed``: the message is part of a recording played back into the session (``agentbus replay``). It
    is logged as any recorded message, marked ``replayed`` on its log entry, and never makes the model due:
    the normalizer publishes no request for it and ingestion leaves the session's turn closed, so no model
    call and no tool run happens while a file is replayed (issue 26). A producer setting it can only keep
    the model from answering its own session, which it could do by not publishing at all.
    """

    type: Literal["recorded_message"] = "recorded_message"
    message: Message
    replayed: bool = False


class PiMessagePayload(WireModel):
    """A pi-shaped message (P1: user / assistant / toolResult / bashExecution / custom) from a pi producer.
    Ingestion maps it into the Claude Code model at the boundary
    (:func:`agentbus_redis.pi.ingress.pi_message_to_claude_code`)
    with ``uuid`` (the SDK mints one); ``execute_tools`` as for :class:`AssistantReply`."""

    type: Literal["pi_message"] = "pi_message"
    message: PiMessage
    uuid: str = Field(min_length=1)
    execute_tools: bool = True


IngressPayload = Annotated[
    UserPrompt
    | AssistantReply
    | StreamEvent
    | StreamFallback
    | SystemNotice
    | AttachmentNotice
    | Interrupt
    | ToolProgressReport
    | ToolResultReport
    | ToolJobAbandoned
    | DeadlineSweep
    | StuckTurnSweep
    | RecordedMessage
    | PiMessagePayload
    | ApprovalRequested
    | ApprovalAnswer,
    Field(discriminator="type"),
    SerializeAsAny(),  # dumped by the value's own model (see wire.py)
]
INGRESS_PAYLOAD_ADAPTER: TypeAdapter[IngressPayload] = TypeAdapter(IngressPayload)


class IngressEnvelope(BusModel):
    """One ingress entry."""

    v: int = SCHEMA_VERSION
    session_id: str = Field(min_length=1)
    idempotency_key: str = Field(min_length=1)
    payload: IngressPayload
    traceparent: str | None = None


class LogEntry(BusModel):
    """One entry of the canonical event log: a message (or tombstone) in its place in the session.

    ``seq`` is the per-session sequence number (1, 2, …) assigned by ingestion, the log's only writer;
    stored messages carry their ``parentUuid`` and ``sessionId`` already assigned.
    """

    v: int = SCHEMA_VERSION
    session_id: str
    seq: int
    message: Message
    traceparent: str | None = None
    ingress_id: str | None = None
    """The ingress entry this came from (its id carries the producer's write time, for end-to-end latency)."""
    replayed: bool = False
    """Logged from a replayed recording (:class:`RecordedMessage` ``replayed``): history, never a reason to
    call the model (``bus/session_history.py``)."""


class ToolJob(BusModel):
    """The tool_use blocks of one assistant reply, to run by one tool worker (R8.5 order)."""

    type: Literal["tool_job"] = "tool_job"
    v: int = SCHEMA_VERSION
    session_id: str
    assistant_uuid: str
    message_id: str | None = None
    tool_uses: list[ToolUseBlock]
    dispatched_ms: int
    """Epoch milliseconds when ingestion handed the job out (an interrupt after it reaches the job)."""
    deadline_ms: int
    """Epoch milliseconds after which a missing result is answered with the placeholder."""
    traceparent: str | None = None


class RequestReady(BusModel):
    """The session is waiting for the model; its API request is stored under ``key``."""

    type: Literal["request_ready"] = "request_ready"
    v: int = SCHEMA_VERSION
    session_id: str
    seq: int
    key: str
    message_count: int
    traceparent: str | None = None


_INGRESS_VALIDATOR = IngressEnvelope.__pydantic_validator__


def parse_ingress(data: str | bytes) -> IngressEnvelope:
    """Validate an ingress entry body; embedded messages are read by their wire (camelCase) names."""
    # The validator ``model_validate_json`` calls, called directly: one Python frame and its argument checks
    # fewer on every ingress entry (ingestion parses each one).
    envelope: IngressEnvelope = _INGRESS_VALIDATOR.validate_json(data, by_alias=True, by_name=False)
    return envelope


def parse_log_entry(data: str | bytes) -> LogEntry:
    """Validate a log entry body."""
    return LogEntry.model_validate_json(data, by_alias=True, by_name=False)


def parse_tool_job(data: str | bytes) -> ToolJob:
    """Validate a tool job body."""
    return ToolJob.model_validate_json(data, by_alias=True, by_name=False)
