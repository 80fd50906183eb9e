"""A3.1 agent ids and the child session id of a sub-agent on the bus.

A child session's id is derived from its parent's and its agentId, ``<parent>:agent-<agentId>``, so every
worker can tell from the id alone that a session is a sub-agent, whose it is, and where its transcript
goes (A4.1: under the ROOT session's directory) without a lookup. The id stays inside the session-id
grammar (session_ids.py); a parent whose id leaves no room for the suffix cannot start agents.

The agentId has Claude Code's shape (``"a"`` + 16 lowercase hex chars) but is derived from the parent
session and the Agent call's tool_use id instead of 8 random bytes: a tool job re-run after a crash then
starts the SAME child (idempotent launch), never a second one.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

from agentbus_redis.session_ids import MAX_SESSION_ID_LENGTH, session_id_problem

AGENT_ID_PATTERN = re.compile(r"a[0-9a-f]{16}")
CHILD_SEPARATOR = ":agent-"
_CHILD_SUFFIX = re.compile(r":agent-(a[0-9a-f]{16})$")
CHILD_SUFFIX_LENGTH = len(CHILD_SEPARATOR) + 17


def agent_id_for(parent_session_id: str, tool_use_id: str) -> str:
    """A3.1-shaped agentId of the child started by ``tool_use_id`` in ``parent_session_id`` (stable)."""
    digest = hashlib.sha256(f"{parent_session_id}\0{tool_use_id}".encode()).hexdigest()
    return "a" + digest[:16]


def child_session_id(parent_session_id: str, agent_id: str) -> str:
    """``<parent>:agent-<agentId>``; raises ``ValueError`` when it would leave the session-id grammar."""
    if AGENT_ID_PATTERN.fullmatch(agent_id) is None:
        raise ValueError(f"not an agentId: {agent_id!r}")
    child = f"{parent_session_id}{CHILD_SEPARATOR}{agent_id}"
    if (problem := session_id_problem(child)) is not None:
        raise ValueError(f"session {parent_session_id!r} cannot start sub-agents: their session id {problem}")
    return child


def max_parent_length() -> int:
    """The longest parent session id that still leaves room for a child suffix."""
    return MAX_SESSION_ID_LENGTH - CHILD_SUFFIX_LENGTH


@dataclass(frozen=True, slots=True)
class ChildSession:
    """What a child session id says about itself."""

    session_id: str
    parent_session_id: str
    agent_id: str

    @property
    def root_session_id(self) -> str:
        """The top-level session of the tree (A4.1: every sub-agent file lives under its directory)."""
        return root_session_id(self.session_id)

    @property
    def depth(self) -> int:
        return depth_of(self.session_id)


def parse_child_session(session_id: str) -> ChildSession | None:
    """The parent and agentId of a child session id; None for a top-level session."""
    match = _CHILD_SUFFIX.search(session_id)
    if match is None or match.start() == 0:
        return None
    return ChildSession(session_id, session_id[: match.start()], match.group(1))


def is_child_session(session_id: str) -> bool:
    return parse_child_session(session_id) is not None


def root_session_id(session_id: str) -> str:
    """The session at the top of ``session_id``'s tree (itself for a top-level session)."""
    while (child := parse_child_session(session_id)) is not None:
        session_id = child.parent_session_id
    return session_id


def depth_of(session_id: str) -> int:
    """0 for a top-level session, 1 for its children, … (A9 depth)."""
    depth = 0
    while (child := parse_child_session(session_id)) is not None:
        session_id = child.parent_session_id
        depth += 1
    return depth
