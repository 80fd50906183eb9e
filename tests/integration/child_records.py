"""A sub-agent's record as the launcher registers it (A1), for tests that write one without running a launch."""

from __future__ import annotations

import time

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.agents.record import ChildRecord


def child_record(parent: str, tool_use_id: str, *, deadline_ms: int | None = None) -> ChildRecord:
    """The record of the child ``parent``'s Agent call ``tool_use_id`` starts now (deadline: ten minutes on)."""
    agent_id = agent_id_for(parent, tool_use_id)
    now = int(time.time() * 1000)
    return ChildRecord(
        session_id=child_session_id(parent, agent_id),
        parent_session_id=parent,
        parent_tool_use_id=tool_use_id,
        parent_assistant_uuid="00000000-0000-4000-8000-000000000001",
        parent_message_id=None,
        agent_id=agent_id,
        agent_type="general-purpose",
        description="look",
        prompt="Look.",
        dispatched_ms=now,
        started_ms=now,
        deadline_ms=now + 600_000 if deadline_ms is None else deadline_ms,
        max_tokens=None,
        max_turns=None,
        depth=1,
        background=False,
    )
