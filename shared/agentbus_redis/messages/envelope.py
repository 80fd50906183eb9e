"""Fields every stored message has (R1.2) plus the optional transcript envelope (R7.3)."""

from __future__ import annotations

from agentbus_redis.wire import CamelModel


class StoredMessageBase(CamelModel):
    """``uuid`` and ``timestamp`` (R1.2) and, when read from or written to a transcript, the chain
    fields and session stamp of R7.3. Messages in flight simply leave the envelope unset."""

    uuid: str
    timestamp: str
    parent_uuid: str | None = None
    logical_parent_uuid: str | None = None
    is_sidechain: bool | None = None
    team_name: str | None = None
    agent_name: str | None = None
    prompt_id: str | None = None
    agent_id: str | None = None
    user_type: str | None = None
    entrypoint: str | None = None
    cwd: str | None = None
    session_id: str | None = None
    version: str | None = None
    git_branch: str | None = None
    slug: str | None = None


ENVELOPE_FIELDS = (
    "parent_uuid",
    "logical_parent_uuid",
    "is_sidechain",
    "team_name",
    "agent_name",
    "prompt_id",
    "agent_id",
    "user_type",
    "entrypoint",
    "cwd",
    "session_id",
    "version",
    "git_branch",
    "slug",
)
"""Attribute names of the transcript envelope (R7.3), in Claude Code's key order."""
