"""Server-Sent Events of the console: a session's conversation as it is written, and the approvals queue.

A session: its own log stream from the start and its live reply stream (the text deltas of a block still
streaming), read in one ``XREAD`` as the SDK's conversation reads them (sdk/conversation.py) and merged by
the deltas' log position; a delta of a block the log already holds is skipped (views/rows.py). Each event is
one JSON list of display rows: the page never builds markup from what it receives.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import redis.asyncio as aioredis

from agentbus_redis.bus.live_reply import LiveDelta
from agentbus_redis.sdk.conversation import merged_entries
from agentbus_redis.stores.approvals import ApprovalStore
from agentbus_redis.streams.topology import Topology
from agentbus_redis.views.rows import Row, delta_row, fresh_delta, message_rows

POLL_MS = 1000
READ_COUNT = 500


def sse(data: object, event: str | None = None) -> str:
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {json.dumps(data, ensure_ascii=False)}\n\n"


async def session_rows(redis: aioredis.Redis, topology: Topology, session_id: str) -> AsyncIterator[str]:
    """The session's rows, as SSE ``data:`` lines, from its first log entry on; a comment line every poll keeps
    the connection checked (a closed page ends the generator)."""
    log_key = topology.session_events(session_id)
    live_key = topology.live_reply(session_id)
    cursors: dict[Any, Any] = {log_key: "0-0", live_key: "0-0"}
    logged_seq = 0
    while True:
        read: Any = await redis.xread(cursors, block=POLL_MS, count=READ_COUNT)
        if not read:
            yield ": idle\n\n"
            continue
        rows: list[Row] = []
        for item in merged_entries(read, cursors, log_key, live_key):
            if isinstance(item, LiveDelta):
                if fresh_delta(item.after_seq, logged_seq):
                    rows.append(delta_row(item.request_id, item.index, item.kind, item.text))
            else:
                logged_seq = item.seq
                rows += message_rows(item.seq, item.message.to_wire())
        if rows:
            yield sse(rows)


async def approval_changes(redis: aioredis.Redis, topology: Topology) -> AsyncIterator[str]:
    """An SSE event each time an approval is requested or answered (by anyone): the page reloads the queue."""
    stream = ApprovalStore(redis, topology).events_stream
    last: Any = await redis.xrevrange(stream, count=1)
    cursor: Any = last[0][0] if last else "0-0"
    yield sse({"changed": True}, "approvals")
    while True:
        read: Any = await redis.xread({stream: cursor}, block=POLL_MS, count=100)
        if not read:
            yield ": idle\n\n"
            continue
        for _, entries in read:
            cursor = entries[-1][0]
        yield sse({"changed": True}, "approvals")
