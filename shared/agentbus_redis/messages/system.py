"""System messages (§1.4): one model per subtype, plus :class:`OtherSystemMessage` for subtypes
agentbus does not know (kept verbatim), and for the subtype-less lines of 1.0.x builds."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.envelope import StoredMessageBase


class SystemMessageBase(StoredMessageBase):
    type: Literal["system"] = "system"
    subtype: str | None = None
    """Absent on the hook progress lines Claude Code 1.0.x wrote (``level``, ``toolUseID``, ANSI text)."""
    content: str | None = None
    level: str | None = None
    is_meta: bool | None = None
    tool_use_id: str | None = Field(default=None, alias="toolUseID")


class InformationalSystemMessage(SystemMessageBase):
    subtype: Literal["informational"] = "informational"
    prevent_continuation: bool | None = None


class PermissionRetrySystemMessage(SystemMessageBase):
    subtype: Literal["permission_retry"] = "permission_retry"
    commands: list[str] = Field(default_factory=list)


class BridgeStatusSystemMessage(SystemMessageBase):
    subtype: Literal["bridge_status"] = "bridge_status"
    url: str | None = None
    upgrade_nudge: JsonValue = None


class ScheduledTaskFireSystemMessage(SystemMessageBase):
    subtype: Literal["scheduled_task_fire"] = "scheduled_task_fire"


class StopHookSummarySystemMessage(SystemMessageBase):
    subtype: Literal["stop_hook_summary"] = "stop_hook_summary"
    hook_count: int | None = None
    hook_infos: list[JsonValue] | None = None
    hook_errors: list[JsonValue] | None = None
    prevented_continuation: bool | None = None
    stop_reason: str | None = None
    has_output: bool | None = None
    hook_label: str | None = None
    total_duration_ms: float | None = None


class TurnDurationSystemMessage(SystemMessageBase):
    subtype: Literal["turn_duration"] = "turn_duration"
    duration_ms: float | None = None
    budget_tokens: JsonValue = None
    budget_limit: JsonValue = None
    budget_nudges: JsonValue = None
    message_count: int | None = None


class AwaySummarySystemMessage(SystemMessageBase):
    subtype: Literal["away_summary"] = "away_summary"


class MemorySavedSystemMessage(SystemMessageBase):
    subtype: Literal["memory_saved"] = "memory_saved"
    written_paths: list[str] | None = None


class AgentsKilledSystemMessage(SystemMessageBase):
    subtype: Literal["agents_killed"] = "agents_killed"


class ApiMetricsSystemMessage(SystemMessageBase):
    subtype: Literal["api_metrics"] = "api_metrics"
    ttft_ms: float | None = None
    otps: float | None = None
    is_p50: bool | None = None
    hook_duration_ms: float | None = None
    turn_duration_ms: float | None = None
    tool_duration_ms: float | None = None
    classifier_duration_ms: float | None = None
    tool_count: int | None = None
    hook_count: int | None = None
    classifier_count: int | None = None
    config_write_count: int | None = None


class LocalCommandSystemMessage(SystemMessageBase):
    """The only system subtype sent to the model (R4.4, R4.5)."""

    subtype: Literal["local_command"] = "local_command"


class CompactBoundarySystemMessage(SystemMessageBase):
    """R2.4b: ``parentUuid`` null on disk, ``logicalParentUuid`` links to the pre-compact history."""

    subtype: Literal["compact_boundary"] = "compact_boundary"
    compact_metadata: JsonObject | None = None


class MicrocompactBoundarySystemMessage(SystemMessageBase):
    subtype: Literal["microcompact_boundary"] = "microcompact_boundary"
    microcompact_metadata: JsonObject | None = None


class ApiErrorSystemMessage(SystemMessageBase):
    subtype: Literal["api_error"] = "api_error"
    error: JsonValue = None
    cause: JsonValue = None
    retry_in_ms: float | None = None
    retry_attempt: int | None = None
    max_retries: int | None = None


class FileSnapshotSystemMessage(SystemMessageBase):
    subtype: Literal["file_snapshot"] = "file_snapshot"
    snapshot_files: list[JsonObject] | None = None


class TaskStartedSystemMessage(SystemMessageBase):
    """A6.3 SDK task event: a sub-agent started (builders: agents/task_events.py). SDK-only, as every
    task event: never sent to the API, never recorded, not part of the parent chain."""

    subtype: Literal["task_started"] = "task_started"
    task_id: str = Field(alias="task_id")
    task_tool_use_id: str = Field(alias="tool_use_id")
    """The Agent call's tool_use id (the base class's ``toolUseID`` is a different field)."""
    description: str
    task_type: str = Field(alias="task_type")
    prompt: str


class TaskProgressSystemMessage(SystemMessageBase):
    """A6.3: after each sub-agent message that ends with a tool_use."""

    subtype: Literal["task_progress"] = "task_progress"
    task_id: str = Field(alias="task_id")
    task_tool_use_id: str = Field(alias="tool_use_id")
    description: str
    usage: JsonObject
    """``{total_tokens, tool_uses, duration_ms}``."""
    last_tool_name: str = Field(alias="last_tool_name")
    summary: str | None = None


class TaskNotificationSystemMessage(SystemMessageBase):
    """A6.3: a foreground sub-agent finished (does not trigger a model turn)."""

    subtype: Literal["task_notification"] = "task_notification"
    task_id: str = Field(alias="task_id")
    task_tool_use_id: str = Field(alias="tool_use_id")
    status: Literal["completed", "failed", "stopped"]
    output_file: str = Field(alias="output_file")
    summary: str
    usage: JsonObject


TaskSystemMessage = TaskStartedSystemMessage | TaskProgressSystemMessage | TaskNotificationSystemMessage
SDK_ONLY_SYSTEM_SUBTYPES = frozenset({"task_started", "task_progress", "task_notification"})
"""A6.3: system messages Claude Code yields to the SDK stream only: they stay out of the Messages API
request, the transcript (R7.5) and the parent chain (R7.6)."""


def is_sdk_only(message: object) -> bool:
    """A6.3: a task event (see :data:`SDK_ONLY_SYSTEM_SUBTYPES`)."""
    return isinstance(message, SystemMessageBase) and message.subtype in SDK_ONLY_SYSTEM_SUBTYPES


class OtherSystemMessage(SystemMessageBase):
    """A subtype agentbus does not model (internal or newer ones), or none at all (1.0.x hook lines such as
    ``{"type":"system","content":"\\u001b[1mStop\\u001b[22m [...] completed successfully","level":"info",
    "toolUseID":…}``); passes through unchanged and joins the parent chain like any system message (R7.6)."""


_SUBTYPE_MODELS: tuple[type[SystemMessageBase], ...] = (
    InformationalSystemMessage,
    PermissionRetrySystemMessage,
    BridgeStatusSystemMessage,
    ScheduledTaskFireSystemMessage,
    StopHookSummarySystemMessage,
    TurnDurationSystemMessage,
    AwaySummarySystemMessage,
    MemorySavedSystemMessage,
    AgentsKilledSystemMessage,
    ApiMetricsSystemMessage,
    LocalCommandSystemMessage,
    CompactBoundarySystemMessage,
    MicrocompactBoundarySystemMessage,
    ApiErrorSystemMessage,
    FileSnapshotSystemMessage,
    TaskStartedSystemMessage,
    TaskProgressSystemMessage,
    TaskNotificationSystemMessage,
)

SYSTEM_SUBTYPE_TAGS: dict[str, str] = {
    str(model.model_fields["subtype"].default): f"system:{model.model_fields['subtype'].default}"
    for model in _SUBTYPE_MODELS
}

KnownSystemMessage = (
    InformationalSystemMessage
    | PermissionRetrySystemMessage
    | BridgeStatusSystemMessage
    | ScheduledTaskFireSystemMessage
    | StopHookSummarySystemMessage
    | TurnDurationSystemMessage
    | AwaySummarySystemMessage
    | MemorySavedSystemMessage
    | AgentsKilledSystemMessage
    | ApiMetricsSystemMessage
    | LocalCommandSystemMessage
    | CompactBoundarySystemMessage
    | MicrocompactBoundarySystemMessage
    | ApiErrorSystemMessage
    | FileSnapshotSystemMessage
    | TaskStartedSystemMessage
    | TaskProgressSystemMessage
    | TaskNotificationSystemMessage
)
"""A system message of a subtype agentbus models."""

SystemMessage = KnownSystemMessage | OtherSystemMessage
"""Any system message."""
