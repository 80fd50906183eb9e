"""What the console's pages read from the bus: each a few pipelined reads of indexes that already exist, so a
page costs the same with 100 sessions or 100,000 (the sessions page reads one page of the state indexes and
the ledgers of the rows on it, never the sessions themselves)."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from agentbus_redis.bus.ledger import LedgerState
from agentbus_redis.streams.deadletter import dead_letter_streams, newest_dead_letters
from agentbus_redis.streams.topology import LANE_OF_GROUP, Topology
from agentbus_redis.views.paging import IndexRow, comes_after, decode_cursor, merge_page
from agentbus_redis.views.states import SessionFilter, session_state, states_of_filter

MAX_PAGE = 200


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _load_state(raw: bytes | str | None) -> LedgerState | None:
    if raw is None:
        return None
    return LedgerState.model_validate_json(raw, by_alias=True, by_name=False)


async def _candidates(redis: aioredis.Redis, key: str, after: IndexRow | None, limit: int) -> list[IndexRow]:
    """The first rows of one index at or after the cursor, ``limit + 1`` of them strictly after it when the index
    has that many: rows tied with the cursor's score are skipped by reading further (doubling)."""
    count = limit + 1
    top: float | str = "+inf" if after is None else after.score
    while True:
        raw: Any = await redis.zrange(key, top, "-inf", desc=True, byscore=True, offset=0, num=count, withscores=True)
        rows = [IndexRow(int(score), _text(member)) for member, score in raw]
        past = [row for row in rows if comes_after(row, after)]
        if len(raw) < count or len(past) > limit:
            return past
        count *= 2


async def list_sessions(
    redis: aioredis.Redis, topology: Topology, *, state: SessionFilter, cursor: str | None, limit: int
) -> dict[str, Any]:
    """One page of sessions, newest activity (or newest state change) first, each with its state and what it
    waits for; and the cursor of the next page."""
    limit = max(1, min(limit, MAX_PAGE))
    after = decode_cursor(cursor) if cursor else None
    states = states_of_filter(state)
    keys = (
        topology.session_indexes()
        if states is None
        else [topology.session_state_index(shard, name) for shard in range(topology.shards) for name in states]
    )
    candidates = [await _candidates(redis, key, after, limit) for key in keys]
    page, next_cursor = merge_page(candidates, after=after, limit=limit)
    return {"sessions": await describe_sessions(redis, topology, page), "next": next_cursor}


async def find_session(redis: aioredis.Redis, topology: Topology, session_id: str) -> dict[str, Any]:
    """The sessions page searched by id: the session with that id, if the bus knows it."""
    shard = topology.names.shard_of(session_id)
    score = await redis.zscore(topology.sessions(shard), session_id)
    if score is None:
        return {"sessions": [], "next": None}
    return {"sessions": await describe_sessions(redis, topology, [IndexRow(int(score), session_id)]), "next": None}


async def describe_sessions(redis: aioredis.Redis, topology: Topology, rows: list[IndexRow]) -> list[dict[str, Any]]:
    """Each row's session with its state (from its ledger, read in one pipeline)."""
    async with redis.pipeline(transaction=False) as pipe:
        for row in rows:
            pipe.get(topology.ledger(row.member))
        replies = await pipe.execute()
    described = []
    for row, raw in zip(rows, replies, strict=True):
        ledger = _load_state(raw)
        described.append(
            {
                "session_id": row.member,
                "activity_ms": row.score,
                "state": session_state(ledger) if ledger is not None else "ended",
                "seq": ledger.seq if ledger is not None else 0,
                "pending_tools": sorted(p.name or "?" for p in ledger.pending.values()) if ledger is not None else [],
            }
        )
    return described


async def session_overview(redis: aioredis.Redis, topology: Topology, session_id: str) -> dict[str, Any] | None:
    """The session page's header: state, seq, what waits; None when the bus has never seen the session."""
    raw = await redis.get(topology.ledger(session_id))
    ledger = _load_state(raw)
    if ledger is None:
        return None
    return {
        "session_id": session_id,
        "state": session_state(ledger),
        "seq": ledger.seq,
        "pending_tools": {tool_use_id: p.name for tool_use_id, p in ledger.pending.items()},
        "approvals": sorted(ledger.approvals.pending),
        "queued_prompts": len(ledger.queued_prompts),
    }


async def dead_letter_stream_names(redis: aioredis.Redis, topology: Topology) -> list[str]:
    return await dead_letter_streams(redis, topology.names)


async def dead_letters(redis: aioredis.Redis, topology: Topology, *, limit: int = 50) -> list[dict[str, Any]]:
    """The newest dead letters of every dead-letter stream, with their reason, history and original fields."""
    letters = []
    for stream in await dead_letter_streams(redis, topology.names):
        for letter in await newest_dead_letters(redis, stream, count=limit):
            letters.append(
                {
                    "dlq_stream": stream,
                    "dlq_id": letter.dlq_id,
                    "stream": letter.stream,
                    "group": letter.group,
                    "entry_id": letter.entry_id,
                    "consumer": letter.consumer,
                    "delivery_count": letter.delivery_count,
                    "reason": letter.reason,
                    "detail": letter.detail,
                    "at_ms": letter.at_ms,
                    "fields": letter.text_fields(),
                }
            )
    return letters


async def bus_overview(redis: aioredis.Redis, topology: Topology) -> dict[str, Any]:
    """Workers alive per lane (their lease heartbeats), each shard's owner, every stream's lag and pending, and
    the tool catalog (as ``agentbus streams info`` and ``agentbus tools ls --json`` show them)."""
    from agentbus_redis.runtime.stream_admin import stream_report
    from agentbus_redis.stores.tool_catalog import read_catalog_snapshot, snapshot_json

    names = topology.names
    now_ms = int(time.time() * 1000)
    lanes = []
    for lane in LANE_OF_GROUP:
        members: Any = await redis.zrange(names.lease_members_key(lane), now_ms, "+inf", byscore=True)
        async with redis.pipeline(transaction=False) as pipe:
            for shard in range(topology.shards):
                pipe.get(names.lease_key(lane, shard))
            owners = await pipe.execute()
        lanes.append(
            {
                "lane": lane,
                "workers": sorted(_text(member) for member in members),
                "owners": [_text(owner) if owner is not None else None for owner in owners],
            }
        )
    streams = await stream_report(redis, topology)
    catalog = snapshot_json(await read_catalog_snapshot(redis, topology))
    return {"lanes": lanes, "streams": streams, "tools": catalog}
