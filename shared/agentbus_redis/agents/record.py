"""What the bus remembers about one running child (stored beside the child session, written once by the
tool worker that launched it)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from agentbus_redis.agents.results import ChildFacts
from agentbus_redis.wire import WireModel

ChildStatus = Literal["running", "completed", "interrupted", "failed", "killed"]
"""``failed``: stopped by a limit (A9) or refused after launch; ``killed``: a background child stopped
explicitly (A8.3)."""


class ChildRecord(WireModel):
    """The link from a child session to the parent's Agent call (snake_case bus format)."""

    session_id: str
    parent_session_id: str
    parent_tool_use_id: str
    parent_assistant_uuid: str
    parent_message_id: str | None = None
    agent_id: str
    agent_type: str
    description: str
    prompt: str
    dispatched_ms: int
    """When ingestion handed out the parent's call (a parent interrupt at or after it cancels the child)."""
    started_ms: int
    deadline_ms: int
    """Wall-time limit (A9), already clipped before the parent call's placeholder deadline."""
    max_tokens: int | None = None
    max_turns: int | None = Field(default=None, ge=1)
    depth: int = Field(ge=1)
    permission_mode: str | None = None
    """A3.7: the mode the child's tool calls are decided in (None: the tool workers' own)."""
    background: bool = False
    """A1.2 ``run_in_background``: the parent's call was answered at launch (A5.3); the child's end is a
    task notification (A5.4); it survives the parent's interrupt (A8.3); its asks are denied (H8.2)."""
    output_file: str | None = None
    """A5.3 ``output_file`` of a background child (in the tool workers' workspace)."""
    round_prompt_uuid: str | None = None
    """A4.4: the uuid of the prompt a ``SendMessage`` continued the child with; this round's result is built
    from that prompt on (None: the first round, the whole log)."""

    @property
    def facts(self) -> ChildFacts:
        return ChildFacts(
            agent_id=self.agent_id,
            agent_type=self.agent_type,
            prompt=self.prompt,
            description=self.description,
            started_ms=self.started_ms,
        )


class ChildSummary(WireModel):
    """One node of a session tree (``bus.session_tree``, ``--tree`` views)."""

    session_id: str
    agent_id: str | None = None
    agent_type: str | None = None
    description: str | None = None
    status: str | None = None
    parent_tool_use_id: str | None = None
    children: list[ChildSummary] = Field(default_factory=list)
