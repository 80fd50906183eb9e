"""The session-id grammar, defined once: every entry point (SDK, CLI, ingestion) and every function
that builds a path from a session id checks it here.

A session id becomes a file name (the transcript ``<id>.jsonl``, the lock ``<id>.lock``) and part of
Redis keys, so it may only hold characters that are safe in both: ``[A-Za-z0-9._:-]``, 1 to 128 of
them, and never ``.`` or ``..`` (which name directories). Claude Code's session ids are UUIDs: a transcript
is named by :func:`claude_session_id` of the session, so ``claude --resume`` opens it.
"""

from __future__ import annotations

import re
import uuid
from functools import lru_cache

from agentbus_redis.errors import AgentbusError

MAX_SESSION_ID_LENGTH = 128
SESSION_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_DOT_NAMES = frozenset({".", ".."})


class InvalidSessionId(AgentbusError, ValueError):
    """A session id outside the grammar; ``session_id`` is the refused value, ``problem`` says why."""

    def __init__(self, session_id: str, problem: str) -> None:
        super().__init__(f"invalid session id {session_id!r}: {problem}")
        self.session_id = session_id
        self.problem = problem


@lru_cache(maxsize=1 << 16)  # ingestion's door asks for every entry, and a session sends many
def session_id_problem(session_id: str) -> str | None:
    """Why ``session_id`` is not a valid session id, or None when it is."""
    if not session_id:
        return "it is empty"
    if len(session_id) > MAX_SESSION_ID_LENGTH:
        return f"it is {len(session_id)} characters long (at most {MAX_SESSION_ID_LENGTH})"
    if session_id in _DOT_NAMES:
        return "'.' and '..' name directories"
    if SESSION_ID_PATTERN.fullmatch(session_id) is None:
        bad = next(char for char in session_id if SESSION_ID_PATTERN.fullmatch(char) is None)
        return f"character {bad!r} is not allowed (only letters, digits and . _ : -)"
    return None


def check_session_id(session_id: str) -> str:
    """``session_id`` itself when it is valid; raises :class:`InvalidSessionId` otherwise."""
    problem = session_id_problem(session_id)
    if problem is not None:
        raise InvalidSessionId(session_id, problem)
    return session_id


CLAUDE_SESSION_NAMESPACE = uuid.UUID("20dc01c7-448a-5ea4-bb2c-1b58c6f3148c")
"""uuid5(NAMESPACE_URL, "agentbus:session-id"): the namespace a non-UUID session id is mapped under. Fixed
forever: changing it would rename every transcript agentbus has written."""

_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def claude_session_id(session_id: str) -> str:
    """The UUID Claude Code knows ``session_id``'s transcript by: the transcript's file name
    (``<uuid>.jsonl``) and the ``sessionId`` of its lines, the id ``claude --resume`` takes.

    Claude Code resumes only sessions named by a UUID (R7.1; ``claude --resume my-session`` refuses). A
    session id that is a lowercase UUID already is its own; any other maps to ``uuid5`` of it under
    :data:`CLAUDE_SESSION_NAMESPACE`, the same on every machine and run."""
    check_session_id(session_id)
    if _CANONICAL_UUID.fullmatch(session_id) is not None:
        return session_id
    return str(uuid.uuid5(CLAUDE_SESSION_NAMESPACE, session_id))
