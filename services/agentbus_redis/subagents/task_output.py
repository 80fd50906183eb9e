"""A5.3 ``output_file``: a background child's conversation as a file the parent can Read (or ``tail``).

The file is ``<workspace>/.agentbus/tasks/<agentId>.output`` — in the tool workers' workspace, so the file
tools reach it. The tool worker that launched (or continued, A4.4) a background child follows the child's
own event stream and writes one JSON line per user or assistant message as the bus logged it (what its
transcript holds, A4.2, without the sidechain stamps), until the child's round ended and the stream is read.
The file is a view: the bus holds the child's history, and the file is written from its start again on every round (a
SendMessage that continues it right after its end, on another worker, may repeat a line or two at the
end). A tool worker that stops leaves a file that grows no more — no other worker takes the tail over —
while the task notification still comes (A5.4).
"""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis
import structlog

from agentbus_redis.bus.events import parse_log_entry
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.runtime.codec import DATA_FIELD
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.store import AgentStore

log = structlog.get_logger(__name__)

BLOCK_MS = 1000
READ_COUNT = 100


class TaskOutputFiles:
    """The tails this worker runs, one per child."""

    def __init__(self, redis: aioredis.Redis, topology: Topology) -> None:
        self.redis = redis
        self.topology = topology
        self.store = AgentStore(redis, topology)
        self._tails: dict[str, asyncio.Task[None]] = {}

    def follow(self, child_session_id: str, path: str, *, round_call: str) -> None:
        """Start (or restart) writing ``child_session_id``'s messages to ``path`` for the round that
        ``round_call`` (the Agent or SendMessage call) started; the tail stops once that round ended, or a
        later round (perhaps followed by another worker) replaced it."""
        running = self._tails.pop(child_session_id, None)
        if running is not None:
            running.cancel()
        tail = self._tail(child_session_id, Path(path), round_call)
        task = asyncio.get_running_loop().create_task(tail, name="task-output")
        self._tails[child_session_id] = task
        task.add_done_callback(lambda done: self._forget(child_session_id, done))

    def _forget(self, child_session_id: str, task: asyncio.Task[None]) -> None:
        if self._tails.get(child_session_id) is task:
            del self._tails[child_session_id]

    async def close(self) -> None:
        tails = list(self._tails.values())
        for task in tails:
            task.cancel()
        for task in tails:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _tail(self, child_session_id: str, path: Path, round_call: str) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            stream = self.topology.session_events(child_session_id)
            last_id = "0"
            ended = False
            path.write_bytes(b"")
            # Appending (O_APPEND): a previous round's tail that is still draining (perhaps in another
            # worker) adds its last lines at the end instead of writing into the rewritten file's middle.
            with path.open("ab") as file:
                while True:
                    block = None if ended else BLOCK_MS  # once ended: read what is left, then stop
                    rows: Any = await self.redis.xread({stream: last_id}, count=READ_COUNT, block=block)
                    if rows:
                        for entry_id, fields in rows[0][1]:
                            last_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
                            message = parse_log_entry(fields[DATA_FIELD.encode()]).message
                            if isinstance(message, UserMessage | AssistantMessage):
                                file.write(orjson.dumps(message.to_wire()) + b"\n")
                        file.flush()
                        continue
                    if ended:
                        return
                    found = await self.store.record(child_session_id)
                    ended = found is None or found[1] != "running" or found[0].parent_tool_use_id != round_call
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("task_output_failed", child_session_id=child_session_id, path=str(path))
