"""``agentbus tail SESSION --tree``: a session's log and its sub-agents' logs.

Without ``--follow``: the tree outline, then each session's log under a heading (depth first). With it:
every session's entries as they arrive, each line prefixed by ``[<agentId>]`` (``[main]`` for SESSION;
children are found as they are started: the tree is re-read every second).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.subagents.tree import describe_node, walk

TREE_REFRESH_S = 1.0


async def tail_tree(
    bus: AgentbusClient,
    session: str,
    printer: Callable[[str], Callable[[LogEntry], None]],
    *,
    follow: bool,
    echo: Callable[[str], None],
) -> None:
    tree = await bus.session_tree(session)
    if not follow:
        for depth, node in walk(tree):
            echo(f"{'  ' * depth}{describe_node(node)}")
        show = printer("")
        for _, node in walk(tree):
            echo(f"== {describe_node(node)}")
            for entry in await bus.history(node.session_id):
                show(entry)
        return
    followers: dict[str, asyncio.Task[None]] = {}

    async def follow_one(session_id: str, label: str) -> None:
        show = printer(f"[{label}] ")
        async for entry in bus.follow(session_id):
            show(entry)

    try:
        while True:
            for _, node in walk(await bus.session_tree(session)):
                if node.session_id not in followers:
                    label = node.agent_id or "main"
                    followers[node.session_id] = asyncio.create_task(follow_one(node.session_id, label))
            await asyncio.sleep(TREE_REFRESH_S)
    finally:
        for task in followers.values():
            task.cancel()
        for task in followers.values():
            with contextlib.suppress(asyncio.CancelledError):
                await task
