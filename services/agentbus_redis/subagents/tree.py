"""Session trees: a session and the children its Agent calls started, recursively (``bus.session_tree``,
``agentbus usage --tree``, ``agentbus tail --tree``)."""

from __future__ import annotations

from collections.abc import Iterator

import redis.asyncio as aioredis

from agentbus_redis.agents.ids import parse_child_session
from agentbus_redis.agents.record import ChildSummary
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.store import AgentStore

MAX_TREE_SESSIONS = 10_000
"""A tree is read breadth-first up to this many sessions (a guard against a runaway fan-out)."""


async def session_tree(redis: aioredis.Redis, topology: Topology, session_id: str) -> ChildSummary:
    """``session_id`` and every descendant, children in the order their calls were made (agentId order
    when unknown)."""
    store = AgentStore(redis, topology)
    root = await _node(store, session_id)
    queue = [root]
    seen = 1
    while queue and seen < MAX_TREE_SESSIONS:
        node = queue.pop(0)
        for child_id in sorted(await store.children(node.session_id)):
            child = await _node(store, child_id)
            node.children.append(child)
            queue.append(child)
            seen += 1
    return root


async def _node(store: AgentStore, session_id: str) -> ChildSummary:
    found = await store.record(session_id)
    if found is None:
        child = parse_child_session(session_id)
        return ChildSummary(session_id=session_id, agent_id=child.agent_id if child else None)
    record, status = found
    return ChildSummary(
        session_id=session_id,
        agent_id=record.agent_id,
        agent_type=record.agent_type,
        description=record.description,
        status=status,
        parent_tool_use_id=record.parent_tool_use_id,
    )


def walk(node: ChildSummary, depth: int = 0) -> Iterator[tuple[int, ChildSummary]]:
    """Depth-first, the node before its children."""
    yield depth, node
    for child in node.children:
        yield from walk(child, depth + 1)


def describe_node(node: ChildSummary) -> str:
    """``<session>`` or ``<session>  agent <id> (<type>: "<description>") <status>``."""
    if node.agent_type is None:
        return node.session_id
    return f'{node.session_id}  agent {node.agent_id} ({node.agent_type}: "{node.description}") {node.status}'
