"""Which state the console lists a session under, and which states each filter of the sessions page shows.

A session is in exactly one state at a time, so ingestion keeps one sorted set per state and shard (the
session moves between them in the same atomic write that stores its ledger) and the console pages through
the sets a filter names — never through the sessions themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, Literal, get_args

if TYPE_CHECKING:
    from agentbus_redis.bus.ledger import LedgerState

SessionState = Literal["waiting_approval", "waiting_tool", "waiting_model", "failed", "ended"]
SESSION_STATES: Final[tuple[SessionState, ...]] = get_args(SessionState)

SessionFilter = Literal["all", "running", "waiting_model", "waiting_tool", "waiting_approval", "ended", "failed"]
SESSION_FILTERS: Final[tuple[SessionFilter, ...]] = get_args(SessionFilter)

RUNNING_STATES: Final[tuple[SessionState, ...]] = ("waiting_model", "waiting_tool", "waiting_approval")
"""A turn is running while it waits for something: the model, a tool (a child agent included) or a person."""


def session_state(state: LedgerState) -> SessionState:
    """The one state the session is listed under: what its open turn waits for (an approval before a call,
    a call before the model, as bus/stuck_turns.py names them), else whether its last turn failed (M7)."""
    if state.approvals.pending:
        return "waiting_approval"
    if state.pending:
        return "waiting_tool"
    if state.awaiting_model or state.open_replies or state.turn_open:
        return "waiting_model"
    return "failed" if state.last_turn_failed else "ended"


def states_of_filter(name: SessionFilter) -> tuple[SessionState, ...] | None:
    """The states a filter shows (None: every session, read from the activity index instead)."""
    if name == "all":
        return None
    if name == "running":
        return RUNNING_STATES
    return (name,)


__all__ = [
    "RUNNING_STATES",
    "SESSION_FILTERS",
    "SESSION_STATES",
    "SessionFilter",
    "SessionState",
    "session_state",
    "states_of_filter",
]
