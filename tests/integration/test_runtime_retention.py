"""Retention of the work streams against a real Redis (``workers/retention.py``, ecosystem.md P6):
``XTRIM MINID`` behind every group — pending and unread entries stay, lag stays known."""

from __future__ import annotations

from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from agentbus_redis.workers.retention import StreamTrimmer, TrimTarget

pytestmark = pytest.mark.integration

STREAM = "rt:{s00}:ingress"
NOW_MS = 10_000_000


async def _fill(redis: aioredis.Redis, stream: str, count: int) -> list[str]:
    ids = [f"1000-{n}" for n in range(1, count + 1)]
    for entry_id in ids:
        await redis.xadd(stream, {"n": entry_id}, id=entry_id)
    return ids


async def _read(redis: aioredis.Redis, stream: str, group: str, count: int, *, ack: int) -> None:
    reply: Any = await redis.xreadgroup(group, "c", {stream: ">"}, count=count)
    delivered = [entry_id for entry_id, _ in reply[0][1]]
    if ack:
        await redis.xack(stream, group, *delivered[:ack])


def _trimmed_total() -> float:
    return REGISTRY.get_sample_value("agentbus_stream_entries_trimmed_total", {"stream": "ingress"}) or 0.0


async def test_trims_what_every_group_acked_and_keeps_pending_and_unread_entries(aredis: aioredis.Redis) -> None:
    ids = await _fill(aredis, STREAM, 20)
    for group in ("fast", "slow"):
        await aredis.xgroup_create(STREAM, group, id="0")
    await _read(aredis, STREAM, "fast", 20, ack=12)  # 13th..20th pending
    await _read(aredis, STREAM, "slow", 15, ack=15)  # 16th..20th not read yet
    before = _trimmed_total()
    trimmer = StreamTrimmer(
        aredis, [TrimTarget(STREAM, ("fast", "slow"))], keep_acked_ms=0, interval_s=1, now_ms=lambda: NOW_MS
    )

    assert await trimmer.trim_once() == {STREAM: 12}
    remaining: Any = await aredis.xrange(STREAM)
    assert [entry_id.decode() for entry_id, _ in remaining] == ids[12:]
    lags = {row["name"].decode(): row["lag"] for row in await aredis.xinfo_groups(STREAM)}
    assert lags == {"fast": 0, "slow": 5}  # still known: KEDA scales on it
    assert _trimmed_total() == before + 12

    # The fast group acks the rest, the slow one reads and acks everything: the stream empties.
    pending: Any = await aredis.xpending_range(STREAM, "fast", "-", "+", 100)
    await aredis.xack(STREAM, "fast", *[row["message_id"] for row in pending])
    await _read(aredis, STREAM, "slow", 100, ack=100)
    assert await trimmer.trim_once() == {STREAM: 8}
    assert await aredis.xlen(STREAM) == 0
    assert {row["name"].decode(): row["lag"] for row in await aredis.xinfo_groups(STREAM)} == {"fast": 0, "slow": 0}


async def test_missing_pipeline_group_or_retention_window_trims_nothing(aredis: aioredis.Redis) -> None:
    await _fill(aredis, STREAM, 5)
    await aredis.xgroup_create(STREAM, "fast", id="0")
    await _read(aredis, STREAM, "fast", 5, ack=5)
    missing = StreamTrimmer(
        aredis, [TrimTarget(STREAM, ("fast", "slow"))], keep_acked_ms=0, interval_s=1, now_ms=lambda: NOW_MS
    )
    assert await missing.trim_once() == {}
    # Every entry is from t=1000 ms; a window reaching back past it keeps them all.
    windowed = StreamTrimmer(
        aredis, [TrimTarget(STREAM, ("fast",))], keep_acked_ms=NOW_MS - 1000, interval_s=1, now_ms=lambda: NOW_MS
    )
    assert await windowed.trim_once() == {}
    assert await aredis.xlen(STREAM) == 5


async def test_a_stream_that_does_not_exist_yet_is_skipped(aredis: aioredis.Redis) -> None:
    trimmer = StreamTrimmer(aredis, [TrimTarget("rt:absent", ("g",))], keep_acked_ms=0, interval_s=1)
    assert await trimmer.trim_once() == {}
