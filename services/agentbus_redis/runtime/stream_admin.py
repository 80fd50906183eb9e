"""Creating the pipeline's consumer groups up front, and reporting on streams (``agentbus streams``)."""

from __future__ import annotations

import time
from typing import Any

import redis.asyncio as aioredis

from agentbus_redis.runtime.lane_worker import ensure_groups
from agentbus_redis.runtime.redis_client import node_of
from agentbus_redis.streams.drain import stream_id_key, stream_progress
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.topology import (
    INGESTION_GROUP,
    NORMALIZATION_GROUP,
    TOOLS_GROUP,
    TRANSCRIPTS_GROUP,
    Topology,
)

TOOLS_ABANDONED_GROUP = "tools-abandoned"


def all_groups(topology: Topology) -> list[tuple[str, str]]:
    """Every (stream, group) the four worker types read."""
    pairs = [(stream, INGESTION_GROUP) for stream in topology.names.shard_streams("ingress")]
    for stream in topology.names.shard_streams("log"):
        pairs += [(stream, NORMALIZATION_GROUP), (stream, TRANSCRIPTS_GROUP)]
    for stream in topology.tool_job_streams():
        pairs += [(stream, TOOLS_GROUP), (topology.names.dead_letter_stream(stream), TOOLS_ABANDONED_GROUP)]
    return pairs


async def init_streams(redis: aioredis.Redis, topology: Topology) -> int:
    """Create every stream and group at id 0 (KEDA's scaler needs the groups before it reads them)."""
    pairs = all_groups(topology)
    await ensure_groups(redis, pairs)
    return len(pairs)


async def stream_report(redis: aioredis.Redis, topology: Topology) -> list[dict[str, Any]]:
    """Length, and per group lag / pending / oldest pending age, of every stream of the pipeline; ``node`` is the
    ``host:port`` of the cluster node serving the stream's slot (None on one Redis).

    ``lag`` is 0 for a group that has drained the stream (`agentbus_redis.streams.drain.group_drained`, from ids)
    whatever
    ``XINFO GROUPS`` says (Redis 7.0's phantom lag after an AOF rewrite and a restart); ``redis_lag`` is
    Redis' own figure."""
    rows: list[dict[str, Any]] = []
    streams = sorted({stream for stream, _ in all_groups(topology)} | set(topology.request_streams()))
    now_ms = int(time.time() * 1000)
    for stream in streams:
        node = await node_of(redis, stream)
        length = int(await redis.xlen(stream))
        try:
            groups: list[dict[Any, Any]] = await redis.xinfo_groups(stream)
        except aioredis.ResponseError:
            groups = []
        progress = await stream_progress(redis, stream) if groups else None
        if not groups or progress is None:
            rows.append(
                {
                    "stream": stream,
                    "node": node,
                    "group": None,
                    "length": length,
                    "lag": None,
                    "redis_lag": None,
                    "drained": None,
                    "pending": 0,
                    "oldest_pending_s": None,
                }
            )
            continue
        for group in groups:
            name = id_text(group["name"])
            oldest_id = progress.groups[name].oldest_pending if name in progress.groups else None
            oldest = None if oldest_id is None else max(0.0, (now_ms - stream_id_key(oldest_id)[0]) / 1000)
            redis_lag = group.get("lag")
            drained = progress.drained(name)
            lag = 0 if drained else (int(redis_lag) if redis_lag is not None else None)
            rows.append(
                {
                    "stream": stream,
                    "node": node,
                    "group": name,
                    "length": length,
                    "lag": lag,
                    "redis_lag": int(redis_lag) if redis_lag is not None else None,
                    "drained": drained,
                    "pending": int(group["pending"]),
                    "oldest_pending_s": oldest,
                }
            )
    return rows
