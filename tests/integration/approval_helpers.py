"""Helpers of the approval integration tests (issue 19 §H): the model's side through the SDK, and reading
what the session's log and the workspace show."""

from __future__ import annotations

import json
import uuid

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.approvals import PendingApproval
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.cluster import WorkerCluster, eventually

APPROVE_ENV = {
    "AGENTBUS_TOOLS__ASK_POLICY": "approve",
    "AGENTBUS_TOOLS__APPROVAL_TIMEOUT_S": "600",
    "AGENTBUS_TOOLS__DEADLINE_S": "60",
    "AGENTBUS_TOOLS__TIMEOUT_S": "20",
}


def new_session() -> str:
    return f"apr-{uuid.uuid4().hex[:12]}"


def counting_call(name: str, file: str) -> ToolUseBlock:
    """A Bash call no rule allows (so it asks) that appends one byte to ``file`` each time it runs."""
    return ToolUseBlock(
        id=f"toolu_{name}_{uuid.uuid4().hex[:8]}", name="Bash", input={"command": f"printf x >> {file}"}
    )


async def reply_with(bus: AgentbusClient, session: str, *calls: ToolUseBlock) -> None:
    await bus.send_prompt(session, "go")
    await bus.send_assistant(session, create_assistant_message([TextBlock(text="on it"), *calls]))


async def pending_for(bus: AgentbusClient, session: str, count: int = 1) -> list[PendingApproval]:
    found: list[PendingApproval] = []

    async def ready() -> bool:
        found[:] = await bus.pending_approvals(session)
        return len(found) >= count

    await eventually(ready, timeout_s=30)
    return found


async def results(bus: AgentbusClient, session: str) -> dict[str, UserMessage]:
    """tool_use id → the log's result message."""
    found: dict[str, UserMessage] = {}
    for entry in await bus.history(session):
        if isinstance(entry.message, UserMessage):
            for block in entry.message.blocks:
                if isinstance(block, ToolResultBlock):
                    found[block.tool_use_id] = entry.message
    return found


async def result_for(bus: AgentbusClient, session: str, tool_use_id: str) -> UserMessage:
    holder: dict[str, UserMessage] = {}

    async def answered() -> bool:
        holder.update(await results(bus, session))
        return tool_use_id in holder

    await eventually(answered, timeout_s=30)
    return holder[tool_use_id]


def result_block(message: UserMessage) -> ToolResultBlock:
    return next(block for block in message.blocks if isinstance(block, ToolResultBlock))


def ran(workers: WorkerCluster, file: str) -> str:
    path = workers.workspace / file
    return path.read_text() if path.exists() else ""


async def transcript_result(workers: WorkerCluster, session: str, tool_use_id: str) -> tuple[JsonObject, JsonValue]:
    """The JSONL transcript's tool_result block for ``tool_use_id`` and its line's ``toolUseResult``, once the
    transcripts worker has written it."""
    path = session_file(workers.data_dir, workers.cwd, session)
    found: list[tuple[JsonObject, JsonValue]] = []

    async def written() -> bool:
        if not path.exists():
            return False
        for raw in path.read_text().splitlines():
            line = json.loads(raw)
            content = line.get("message", {}).get("content") if line.get("type") == "user" else None
            for block in content if isinstance(content, list) else []:
                if block.get("type") == "tool_result" and block.get("tool_use_id") == tool_use_id:
                    found.append((block, line.get("toolUseResult")))
        return bool(found)

    await eventually(written, timeout_s=30)
    return found[0]
