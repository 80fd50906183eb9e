"""A6.1 the ``agent_progress`` messages the parent sees while its child runs.

The first carries the child's first user message and the prompt; then one per child message holding a
``tool_use`` or ``tool_result`` block, with ``prompt: ""``. Envelope: ``toolUseID`` = ``"agent_"`` + the
parent assistant message's id, ``parentToolUseID`` = the Agent call's tool_use id. The child's shell
progress (``bash_progress``, ``powershell_progress``) is forwarded as it is, with its own ids and the Agent
call as its parent. The child's final text-only answer is never sent as progress (it arrives in the
tool_result, A6.1 [OBS]). Progress is ephemeral: the transcript writer drops it (R7.5).
"""

from __future__ import annotations

import uuid as uuid_module

from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.factories import create_progress_message
from agentbus_redis.messages.kinds import AssistantMessage, ProgressMessage, UserMessage

_PROGRESS_NAMESPACE = uuid_module.UUID("6f1c3c52-6d0b-4a38-9a53-0b3f6e0d6a10")


def progress_tool_use_id(parent_message_id: str | None, parent_assistant_uuid: str) -> str:
    """A6.1 ``toolUseID``: ``agent_`` + the parent assistant message's API id (its uuid when it has none)."""
    return "agent_" + (parent_message_id or parent_assistant_uuid)


def agent_progress(
    message: UserMessage | AssistantMessage,
    *,
    agent_id: str,
    prompt: str,
    parent_tool_use_id: str,
    parent_message_id: str | None,
    parent_assistant_uuid: str,
    timestamp: str,
) -> ProgressMessage:
    """One ``agent_progress`` message for ``message`` of the child. Its uuid is derived from the child
    message's, so publishing it twice is one message."""
    data: JsonObject = {
        "type": "agent_progress",
        "message": message.to_wire(),
        "prompt": prompt,
        "agentId": agent_id,
    }
    progress_uuid = str(uuid_module.uuid5(_PROGRESS_NAMESPACE, f"{parent_tool_use_id}:{message.uuid}"))
    return create_progress_message(
        tool_use_id=progress_tool_use_id(parent_message_id, parent_assistant_uuid),
        parent_tool_use_id=parent_tool_use_id,
        data=data,
        clock=lambda: timestamp,
        ids=lambda: progress_uuid,
    )


SHELL_PROGRESS_TYPES = frozenset({"bash_progress", "powershell_progress"})


def forwarded_shell_progress(progress: ProgressMessage, *, parent_tool_use_id: str) -> ProgressMessage | None:
    """A6.1: a child's shell progress as the parent sees it (same data and ``toolUseID``, the Agent call as
    ``parentToolUseID``, a uuid derived from the child's); None for any other progress."""
    if progress.data.get("type") not in SHELL_PROGRESS_TYPES:
        return None
    forwarded_uuid = str(uuid_module.uuid5(_PROGRESS_NAMESPACE, f"{parent_tool_use_id}:{progress.uuid}"))
    return progress.model_copy(
        update={"uuid": forwarded_uuid, "parent_tool_use_id": parent_tool_use_id, "parent_uuid": None}
    )
