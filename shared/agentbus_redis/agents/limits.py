"""A9 limits of sub-agents on the bus: depth, fan-out, tokens, turns and wall time per child.

Claude Code's own limits are "no nesting" (sub-agents lack the Agent tool), the 100 000-character result
limit and ``maxTurns``; a bus that runs children on any worker also needs fan-out, token and wall-time
limits (agentbus). The wall-time limit is clipped to the parent call's placeholder deadline minus a margin,
so a child is always stopped — and its parent answered with the limit's error — before the placeholder
rule would answer the parent's call with ``[Tool result missing due to internal error]``.
"""

from __future__ import annotations

from dataclasses import dataclass

DEADLINE_MARGIN_MS = 5_000
"""How long before the parent call's placeholder deadline a child is stopped at the latest."""


@dataclass(frozen=True, slots=True)
class AgentLimits:
    max_depth: int = 1
    """Deepest child (1: children only, no nesting — A9)."""
    max_children: int = 10
    """Children of one session running at once (fan-out)."""
    max_tokens: int | None = None
    """Tokens one child may use across its model calls (None: unlimited)."""
    wall_time_s: float = 600.0
    """Wall time of one child."""

    @property
    def allow_nesting(self) -> bool:
        return self.max_depth > 1


def depth_problem(parent_depth: int, limits: AgentLimits) -> str | None:
    """Why a session at ``parent_depth`` may not start a child (agentbus text), or None."""
    if parent_depth + 1 > limits.max_depth:
        return (
            f"Sub-agents cannot start further agents (depth {parent_depth + 1} exceeds the limit of {limits.max_depth})"
        )
    return None


def fan_out_problem(running: int, limits: AgentLimits) -> str | None:
    """Why one more child may not start when ``running`` children (this one included) run (agentbus)."""
    if running > limits.max_children:
        return f"Too many agents running at once for this session (limit {limits.max_children})"
    return None


def background_deadline_ms(*, started_ms: int, limits: AgentLimits) -> int:
    """A background child's wall time: its parent's call was answered at launch, so no call deadline clips it."""
    return started_ms + int(limits.wall_time_s * 1000)


def child_deadline_ms(*, started_ms: int, call_deadline_ms: int, limits: AgentLimits) -> int:
    """When the child is stopped: its wall time, clipped before the parent call's placeholder deadline."""
    return min(started_ms + int(limits.wall_time_s * 1000), call_deadline_ms - DEADLINE_MARGIN_MS)
