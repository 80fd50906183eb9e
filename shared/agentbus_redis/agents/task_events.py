"""A6.3 SDK task events of a sub-agent, as its parent's session stream carries them.

Claude Code yields three SDK-only system messages per foreground agent (``utils/sdkEventQueue.ts``,
``utils/task/sdkProgress.ts``):

- ``task_started`` ``{task_id, tool_use_id, description, task_type, prompt}`` when the agent starts;
- ``task_progress`` ``{task_id, tool_use_id, description, usage: {total_tokens, tool_uses, duration_ms},
  last_tool_name}`` after each of the agent's messages that ends with a tool_use;
- ``task_notification`` ``{task_id, tool_use_id, status: completed|failed|stopped, output_file: "",
  summary: <description>, usage}`` when it finished (it does not trigger a model turn).

On the bus they are log entries of the PARENT session (system messages the launcher and the relay publish), so the
SDK (``bus.converse()``: ``TaskStarted`` / ``TaskProgress`` / ``TaskNotification`` events) and ``agentbus
tail --tree`` show them in order with the rest of the turn; they stay out of the Messages API request, the
transcript and the parent chain (``agentbus_redis.messages.system.is_sdk_only``).

Our choices where the spec names no value: ``task_id`` is the agentId (Claude Code's local agent tasks
are keyed by it), ``task_type`` is ``local_agent``; ``usage.total_tokens`` is the latest reply's
input-side tokens plus the output tokens of every reply (A5.4's progress count), ``duration_ms`` the wall
time since the child started. Every event's uuid derives from the Agent call (and the child message it
follows), so publishing one twice is one event.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Sequence
from typing import Literal, TypeVar

from agentbus_redis.agents.record import ChildRecord, ChildStatus
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage
from agentbus_redis.messages.system import (
    TaskNotificationSystemMessage,
    TaskProgressSystemMessage,
    TaskStartedSystemMessage,
)

TaskT = TypeVar("TaskT", TaskStartedSystemMessage, TaskProgressSystemMessage, TaskNotificationSystemMessage)

TASK_TYPE = "local_agent"
"""``task_type`` of a sub-agent started by the Agent tool."""

_TASK_NAMESPACE = uuid_module.UUID("3b8e41d2-5f0c-4c8e-9a57-7d7c2f1e0a64")

NOTIFICATION_STATUS: dict[ChildStatus, Literal["completed", "failed", "stopped"]] = {
    "completed": "completed",
    "failed": "failed",
    "interrupted": "stopped",
    "running": "stopped",
}
"""A6.3 ``status`` for how the child ended (an interrupted child was stopped)."""


def _uuid(record: ChildRecord, what: str) -> str:
    return str(uuid_module.uuid5(_TASK_NAMESPACE, f"{record.parent_tool_use_id}:{what}"))


def last_tool_use(message: Message) -> ToolUseBlock | None:
    """The tool_use an assistant message ends with (A6.3 ``last_tool_name``), else None."""
    if isinstance(message, AssistantMessage) and message.blocks and isinstance(message.blocks[-1], ToolUseBlock):
        return message.blocks[-1]
    return None


def _int(usage: JsonObject, key: str) -> int:
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def task_usage(messages: Sequence[UserMessage | AssistantMessage], *, started_ms: int, now_ms: int) -> JsonObject:
    """A6.3 ``usage``: ``total_tokens`` (latest reply's input-side tokens + every reply's output tokens),
    ``tool_uses`` (tool_use blocks so far), ``duration_ms`` (since the child started)."""
    by_reply: dict[str, JsonObject] = {}
    tool_uses = 0
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        tool_uses += sum(1 for block in message.blocks if isinstance(block, ToolUseBlock))
        if message.message.usage:
            key = message.api_message_id or message.uuid
            by_reply.pop(key, None)  # the reply's latest usage, and the reply moves to the end
            by_reply[key] = message.message.usage
    latest = list(by_reply.values())[-1] if by_reply else {}
    input_side = sum(
        _int(latest, key) for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
    )
    output = sum(_int(usage, "output_tokens") for usage in by_reply.values())
    return {"total_tokens": input_side + output, "tool_uses": tool_uses, "duration_ms": max(0, now_ms - started_ms)}


def _event(model: type[TaskT], record: ChildRecord, what: str, timestamp: str, **fields: JsonValue) -> TaskT:
    """One task event of ``record``'s child: the common fields (uuid derived from the call and ``what``), then
    ``fields`` (wire names)."""
    common: JsonObject = {
        "uuid": _uuid(record, what),
        "timestamp": timestamp,
        "type": "system",
        "subtype": str(model.model_fields["subtype"].default),
        "task_id": record.agent_id,
        "tool_use_id": record.parent_tool_use_id,
    }
    return model.model_validate({**common, **fields}, by_alias=True, by_name=False)


def task_started(record: ChildRecord, *, timestamp: str) -> TaskStartedSystemMessage:
    """A6.3 ``task_started``."""
    return _event(
        TaskStartedSystemMessage,
        record,
        "started",
        timestamp,
        description=record.description,
        task_type=TASK_TYPE,
        prompt=record.prompt,
    )


def task_progress(
    record: ChildRecord, message: AssistantMessage, tool: ToolUseBlock, *, usage: JsonObject, timestamp: str
) -> TaskProgressSystemMessage:
    """A6.3 ``task_progress`` after the child's ``message``, which ends with ``tool``."""
    return _event(
        TaskProgressSystemMessage,
        record,
        f"progress:{message.uuid}",
        timestamp,
        description=record.description,
        usage=usage,
        last_tool_name=tool.name,
    )


def task_notification(
    record: ChildRecord, status: ChildStatus, *, usage: JsonObject, timestamp: str
) -> TaskNotificationSystemMessage:
    """A6.3 ``task_notification`` of a foreground child (``output_file`` is empty: no output file)."""
    return _event(
        TaskNotificationSystemMessage,
        record,
        "notification",
        timestamp,
        status=NOTIFICATION_STATUS[status],
        output_file="",
        summary=record.description,
        usage=usage,
    )
