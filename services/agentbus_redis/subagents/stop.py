"""A8.3: stop a sub-agent explicitly (``bus.stop_agent``, ``agentbus agents stop``).

A background child survives its parent's interrupt; this is how it ends early. The stop is an interrupt
(``user_cancel``) into the child's own session: its model call and tools stop and its pending calls get
the interruption texts (A8.1), and the relay answers the parent — a background child's with a task
notification ``status: killed`` carrying its partial result (A5.4), a foreground child's call with
REJECT_MESSAGE (A8.2).
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agentbus_redis.agents.ids import AGENT_ID_PATTERN, is_child_session
from agentbus_redis.agents.record import ChildRecord
from agentbus_redis.errors import AgentbusError
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.store import AgentStore


class AgentNotStoppable(AgentbusError, LookupError):
    """No such sub-agent, or it is not running (the message says which)."""


async def resolve_running_child(redis: aioredis.Redis, topology: Topology, agent: str) -> ChildRecord:
    """The running child ``agent`` names (a child session id or an agentId); raises
    :class:`AgentNotStoppable`."""
    store = AgentStore(redis, topology)
    session = await store.find(agent) if AGENT_ID_PATTERN.fullmatch(agent) else agent
    found = await store.record(session) if session is not None and is_child_session(session) else None
    if found is None:
        raise AgentNotStoppable(f"no sub-agent {agent}")
    record, status = found
    if status != "running":
        raise AgentNotStoppable(f"sub-agent {record.session_id} is not running (status: {status})")
    return record
