"""A4.1 the ``agent-<agentId>.meta.json`` sidecar of a child session's transcript, written by the
transcript worker before the child's first lines (``{agentType, description}``; no worktree)."""

from __future__ import annotations

import asyncio

from agentbus_redis.agents.ids import is_child_session
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.transcript_files.layout import subagent_meta, write_subagent_meta
from agentbus_redis.transcript_files.store import TranscriptStore


class SubagentMetaWriter:
    """``TranscriptWorker(on_new_session=...)``: writes the sidecar of child sessions."""

    def __init__(self, agents: AgentStore, store: TranscriptStore, *, cwd: str) -> None:
        self.agents = agents
        self.store = store
        self.cwd = cwd

    async def __call__(self, session_id: str) -> None:
        if not is_child_session(session_id):
            return
        found = await self.agents.record(session_id)
        if found is None:
            return  # named like a child, started by no Agent call: no type to record
        record = found[0]
        meta = subagent_meta(record.agent_type, description=record.description)
        path = self.store.subagent_path(session_id, self.cwd)
        await asyncio.to_thread(write_subagent_meta, path, meta)
