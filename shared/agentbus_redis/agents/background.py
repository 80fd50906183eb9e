"""Background sub-agents (``run_in_background``, agent-loop.md A1.2): the restricted tool set (A3.4), the
immediate ``tool_result`` of a launch (A5.3) and the ``<task-notification>`` the parent gets when the child
ends (A5.4), exact texts.

A background child answers its parent's Agent call at once; its end is delivered later as a *queued* user
prompt (``UserPrompt.queued``: logged when the parent's turn is over, bus/queued_prompts.py) whose text
is the notification. It survives its parent's interrupt and is stopped only explicitly (A8.3: ``killed``,
with the partial result).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agentbus_redis.agents.results import usage_tokens
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage

BACKGROUND_TOOLS = frozenset(
    {
        "Read",
        "WebSearch",
        "TodoWrite",
        "Grep",
        "WebFetch",
        "Glob",
        "Bash",
        "PowerShell",
        "Edit",
        "Write",
        "NotebookEdit",
        "Skill",
        "StructuredOutput",
        "ToolSearch",
        "EnterWorktree",
        "ExitWorktree",
    }
)
"""A3.4: the only tools a background (async) agent keeps (the shell tools are Bash and PowerShell; the
structured-output tool is ``StructuredOutput``)."""

TASK_OUTPUT_DIR = ".agentbus/tasks"
"""A5.3 ``<task output dir>``, relative to the tool workers' workspace: the file tools can read it there."""

TASK_NOTIFICATION_ORIGIN: JsonObject = {"kind": "task-notification"}
"""The ``origin`` of the queued prompt that delivers a notification (MSG §1.2 ``origin`` kinds)."""

NotificationStatus = Literal["completed", "failed", "killed"]


def background_tools(tools: Iterable[str]) -> list[str]:
    """A3.4: a background child's tools — its ordinary ones, restricted to :data:`BACKGROUND_TOOLS`."""
    return [name for name in tools if name in BACKGROUND_TOOLS]


def output_file_path(workspace_root: str, agent_id: str) -> str:
    """A5.3 ``<task output dir>/<agentId>.output`` (absolute)."""
    return f"{workspace_root.rstrip('/')}/{TASK_OUTPUT_DIR}/{agent_id}.output"


def caller_can_read_output(parent_tools: Iterable[str]) -> bool:
    """A5.3: the longer launch text (with ``output_file``) when the caller has Read or Bash."""
    return any(name in ("Read", "Bash") for name in parent_tools)


def async_launched_text(agent_id: str, *, output_file: str, caller_can_read: bool) -> str:
    """A5.3, exact: the immediate ``tool_result`` text of a background launch."""
    head = (
        "Async agent launched successfully.\n"
        f"agentId: {agent_id} (internal ID - do not mention to user. Use SendMessage with to: '{agent_id}' to "
        "continue this agent.)\n"
        "The agent is working in the background. You will be notified automatically when it completes."
    )
    if caller_can_read:
        tail = (
            "Do not duplicate this agent's work — avoid working with the same files or topics it is using. Work on "
            "non-overlapping tasks, or briefly tell the user what you launched and end your response.\n"
            f"output_file: {output_file}\n"
            "If asked, you can check progress before completion by using Read or Bash tail on the output file."
        )
    else:
        tail = (
            "Briefly tell the user what you launched and end your response. Do not generate any other text — agent "
            "results will arrive in a subsequent message."
        )
    return f"{head}\n{tail}"


def async_launched_data(agent_id: str, *, description: str, prompt: str, output_file: str) -> JsonObject:
    """The ``toolUseResult`` stored beside the launch text (A5.3; CC's ``async_launched`` status)."""
    return {
        "status": "async_launched",
        "agentId": agent_id,
        "description": description,
        "prompt": prompt,
        "outputFile": output_file,
    }


def summary_text(description: str, status: NotificationStatus, error: str | None = None) -> str:
    """A5.4 summary texts, exact."""
    if status == "completed":
        return f'Agent "{description}" completed'
    if status == "failed":
        return f'Agent "{description}" failed: {error or "Unknown error"}'
    return f'Agent "{description}" was stopped'


@dataclass(frozen=True, slots=True)
class TaskUsage:
    total_tokens: int
    tool_uses: int
    duration_ms: int


def background_usage(messages: Sequence[UserMessage | AssistantMessage], *, duration_ms: int) -> TaskUsage:
    """A5.4: ``total_tokens`` = the latest input-side tokens + the cumulative output tokens (each reply
    counted once); ``tool_uses`` = every tool_use block of the child's replies."""
    output_by_reply: dict[str, int] = {}
    latest: JsonObject | None = None
    tool_uses = 0
    for message in messages:
        if not isinstance(message, AssistantMessage):
            continue
        tool_uses += sum(1 for block in message.blocks if isinstance(block, ToolUseBlock))
        usage = message.message.usage
        if usage:
            latest = usage
            output = usage.get("output_tokens")
            output_by_reply[message.api_message_id or message.uuid] = output if isinstance(output, int) else 0
    latest_output = latest.get("output_tokens") if latest else 0
    input_side = usage_tokens(latest) - (latest_output if isinstance(latest_output, int) else 0)
    return TaskUsage(
        total_tokens=input_side + sum(output_by_reply.values()), tool_uses=tool_uses, duration_ms=duration_ms
    )


def final_text(messages: Sequence[UserMessage | AssistantMessage]) -> str | None:
    """A5.4 ``<result>`` / A8.3 partial result: the text of the last assistant message that has text."""
    for message in reversed(messages):
        if isinstance(message, AssistantMessage):
            texts = [block.text for block in message.blocks if isinstance(block, TextBlock)]
            if texts:
                return "\n".join(texts)
    return None


@dataclass(frozen=True, slots=True)
class TaskNotification:
    """A5.4: what one background child's end tells its parent."""

    task_id: str
    output_file: str
    status: NotificationStatus
    summary: str
    tool_use_id: str | None = None
    result: str | None = None
    usage: TaskUsage | None = None

    def render(self) -> str:
        """The exact ``<task-notification>`` text (no worktree section: we keep none)."""
        parts = [f"<task-notification>\n<task-id>{self.task_id}</task-id>"]
        if self.tool_use_id:
            parts.append(f"\n<tool-use-id>{self.tool_use_id}</tool-use-id>")
        parts.append(
            f"\n<output-file>{self.output_file}</output-file>\n<status>{self.status}</status>\n"
            f"<summary>{self.summary}</summary>"
        )
        if self.result is not None:
            parts.append(f"\n<result>{self.result}</result>")
        if self.usage is not None:
            parts.append(
                f"\n<usage><total_tokens>{self.usage.total_tokens}</total_tokens><tool_uses>{self.usage.tool_uses}"
                f"</tool_uses><duration_ms>{self.usage.duration_ms}</duration_ms></usage>"
            )
        parts.append("\n</task-notification>")
        return "".join(parts)


def task_notification(
    *,
    agent_id: str,
    tool_use_id: str | None,
    description: str,
    output_file: str,
    status: NotificationStatus,
    messages: Sequence[UserMessage | AssistantMessage],
    duration_ms: int,
    error: str | None = None,
) -> TaskNotification:
    """A5.4 for a child that ended with ``status``: its final (A8.3: partial) text as ``<result>`` and its
    usage; a failed child's ``error`` goes into the summary."""
    return TaskNotification(
        task_id=agent_id,
        tool_use_id=tool_use_id,
        output_file=output_file,
        status=status,
        summary=summary_text(description, status, error),
        result=final_text(messages),
        usage=background_usage(messages, duration_ms=duration_ms),
    )
