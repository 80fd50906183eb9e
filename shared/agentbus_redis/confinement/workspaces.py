"""Which directory under the tools root a session works in.

``session``: every session, sub-agents included, has a directory of its own. ``tree``: a top-level
session and its sub-agents share the top-level session's directory (the default: a sub-agent works on
its parent's files, another session's are out of reach). ``shared``: every session works in the root
itself (no isolation between sessions).

A session id becomes a path only after :func:`~agentbus_redis.session_ids.check_session_id`; the
grammar has no ``/`` and refuses ``.`` and ``..``, so the name is one path component.
"""

from __future__ import annotations

from typing import Literal

from agentbus_redis.agents.ids import root_session_id
from agentbus_redis.session_ids import check_session_id

WorkspaceScope = Literal["session", "tree", "shared"]
SESSIONS_DIR = "sessions"
"""The tools root's sub-directory holding one directory per session (or tree)."""


def workspace_owner(session_id: str, scope: WorkspaceScope) -> str | None:
    """The session whose directory ``session_id`` works in, or None when every session shares the
    root. Raises :class:`~agentbus_redis.session_ids.InvalidSessionId` for an id outside the grammar."""
    check_session_id(session_id)
    if scope == "shared":
        return None
    return session_id if scope == "session" else root_session_id(session_id)


def workspace_relative_dir(session_id: str, scope: WorkspaceScope) -> str:
    """``sessions/<owner>`` (POSIX, relative to the tools root), or ``""`` for the shared root."""
    owner = workspace_owner(session_id, scope)
    return "" if owner is None else f"{SESSIONS_DIR}/{owner}"
