"""No wait without an owner: when a session's open turn counts as stuck, and what it waits for.

A session's turn waits for one of four things, each with an owner that completes the wait or ends the turn:

- ``model_reply`` — the model worker answers the request (a reply, or an API error, M7); no deadline of its
  own: every attempt, retry notice (M4) and streamed event is progress;
- ``tool_result`` — the tool worker answers the call, or ingestion's deadline sweep answers it with the
  placeholder at the call's deadline (R-rules for missing results);
- ``child_agent`` — an ``Agent`` call: the child's end is relayed, or the agent sweep ends the child at its
  wall time; the call's deadline bounds it like any tool's;
- ``approval`` — a person answers, or the approval times out at its deadline (§H).

An owner can be lost (a reply whose events never reach the log, a deadline entry that was never written, a
worker that died with the only copy of the work). The stuck-turn sweep is the backstop: a turn is stuck
once it has made no progress for ``bound_ms`` *and* its owner's own deadline (if it has one) is ``bound_ms``
behind — so a call or an approval legitimately waiting within its time is never touched, and a sweep never
races the owner that would have acted first.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from agentbus_redis.agents.tool import AGENT_TOOL_NAME, LEGACY_AGENT_TOOL_NAME

if TYPE_CHECKING:
    from agentbus_redis.bus.ledger import LedgerState

WaitingFor = Literal["model_reply", "tool_result", "child_agent", "approval"]

AGENT_TOOL_NAMES = frozenset({AGENT_TOOL_NAME, LEGACY_AGENT_TOOL_NAME})


@dataclass(frozen=True, slots=True)
class SessionWait:
    """What an open turn waits for, since when (its last progress), and its owner's deadline (None: none)."""

    waiting_for: WaitingFor
    since_ms: int
    owner_deadline_ms: int | None


def session_wait(state: LedgerState) -> SessionWait | None:
    """What the session waits for now, or None when nothing (idle, or progress not tracked yet).

    An approval is named first (its call waits on the person, not on a worker), then calls (a child agent
    when any waiting call is an ``Agent`` call), then the model."""
    since = state.last_progress_ms
    if since is None:
        return None
    approvals = state.approvals.pending
    if approvals:
        return SessionWait("approval", since, max(p.deadline_ms for p in approvals.values()))
    if state.pending:
        deadlines = [p.deadline_ms for p in state.pending.values()]
        owner = None if any(d is None for d in deadlines) else max(d for d in deadlines if d is not None)
        child = any(p.name in AGENT_TOOL_NAMES for p in state.pending.values())
        return SessionWait("child_agent" if child else "tool_result", since, owner)
    if state.awaiting_model or state.open_replies:
        return SessionWait("model_reply", since, None)
    return None


def stuck_at_ms(wait: SessionWait, bound_ms: int) -> int:
    """When the wait counts as stuck: ``bound_ms`` after its last progress and after its owner's deadline."""
    return max(wait.since_ms, wait.owner_deadline_ms or 0) + bound_ms


def stuck_wait(state: LedgerState, *, now_ms: int, bound_ms: int) -> SessionWait | None:
    """The wait of a session that is stuck at ``now_ms`` (it is to be ended), else None."""
    wait = session_wait(state)
    if wait is None or stuck_at_ms(wait, bound_ms) > now_ms:
        return None
    return wait


__all__ = ["AGENT_TOOL_NAMES", "SessionWait", "WaitingFor", "session_wait", "stuck_at_ms", "stuck_wait"]
