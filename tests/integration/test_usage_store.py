"""M10.5/M10.6: per-session usage and cost recorded on the bus — atomic, exact under concurrency, a retried
record counted once — on one Redis and on a Cluster."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.runtime import redis_client
from agentbus_redis.stores.usage import (
    read_usage,
    record_priced_usage,
    record_usage,
    seen_key,
)
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from tests.conftest import ON_EVERY_TARGET

pytestmark = [pytest.mark.integration, ON_EVERY_TARGET]

TOPOLOGY = Topology(StreamNames(shards=8))
SONNET = "claude-sonnet-4-5-20250929"
M10_2_USAGE: JsonObject = {
    "input_tokens": 1000,
    "output_tokens": 500,
    "cache_read_input_tokens": 20_000,
    "cache_creation_input_tokens": 5000,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 5000},
}


async def test_m10_5_a_session_without_calls_reads_empty(target_redis: aioredis.Redis) -> None:
    usage = await read_usage(target_redis, TOPOLOGY, "s-none")
    assert usage.empty
    assert usage.total.requests == 0
    assert usage.updated_at_ms is None


async def test_m10_6_a_priced_call_is_recorded_with_its_table_date(target_redis: aioredis.Redis) -> None:
    assert await record_priced_usage(
        target_redis, TOPOLOGY, "s1", model=SONNET, usage=M10_2_USAGE, prices=DEFAULT_PRICES
    )
    usage = await read_usage(target_redis, TOPOLOGY, "s1")
    [(model, calls)] = usage.models.items()
    assert model == SONNET
    assert (calls.requests, calls.cache_creation_1h_input_tokens, calls.cache_creation_5m_input_tokens) == (1, 5000, 0)
    assert calls.cost_usd == 0.0465  # M10.2, the 1h variant
    assert usage.price_tables == {"2026-11-25": 1}
    assert usage.updated_at_ms is not None


async def test_m10_5_totals_are_per_model_and_summed(target_redis: aioredis.Redis) -> None:
    await record_usage(target_redis, TOPOLOGY, "s2", model="claude-opus-4-6", usage={"input_tokens": 10}, cost_usd=0.5)
    await record_usage(target_redis, TOPOLOGY, "s2", model="claude-opus-4-6", usage={"output_tokens": 3}, cost_usd=0.25)
    await record_usage(
        target_redis, TOPOLOGY, "s2", model="claude-opus-4-9", usage={"output_tokens": 4}, cost_usd=0.0, priced=False
    )
    usage = await read_usage(target_redis, TOPOLOGY, "s2")
    assert usage.models["claude-opus-4-6"].requests == 2
    assert usage.models["claude-opus-4-9"].unpriced_requests == 1
    assert (usage.total.requests, usage.total.output_tokens, usage.total.cost_usd) == (3, 7, 0.75)


async def test_m10_5_concurrent_records_add_up_exactly(target_url: str, target_redis: aioredis.Redis) -> None:
    """Four workers (own clients) recording 50 calls each of one session at once: every counter is exact."""
    workers = [redis_client.connect(target_url) for _ in range(4)]
    calls = 200

    async def one(n: int) -> None:
        usage: JsonObject = {"input_tokens": n, "output_tokens": 1, "cache_read_input_tokens": 2}
        worker = workers[n % len(workers)]
        await record_usage(worker, TOPOLOGY, "s3", model=SONNET, usage=usage, cost_usd=0.001, request_id=f"req_{n}")

    try:
        await asyncio.gather(*(one(n) for n in range(calls)))
    finally:
        for worker in workers:
            await worker.aclose()
    total = (await read_usage(target_redis, TOPOLOGY, "s3")).total
    assert (total.requests, total.input_tokens, total.output_tokens) == (calls, sum(range(calls)), calls)
    assert total.cache_read_input_tokens == 2 * calls
    assert total.cost_nano_usd == calls * 1_000_000


async def test_m10_6_a_retried_record_of_one_call_counts_once(target_redis: aioredis.Redis) -> None:
    """The same call's record sent again (a lost reply, a worker that crashed after recording) and raced."""
    results = await asyncio.gather(
        *(
            record_usage(
                target_redis, TOPOLOGY, "s4", model=SONNET, usage=M10_2_USAGE, cost_usd=0.0465, request_id="req_1"
            )
            for _ in range(20)
        )
    )
    assert sorted(results) == [False] * 19 + [True]
    assert await record_usage(
        target_redis, TOPOLOGY, "s4", model=SONNET, usage=M10_2_USAGE, cost_usd=0.0465, request_id="req_2"
    )
    total = (await read_usage(target_redis, TOPOLOGY, "s4")).total
    assert (total.requests, total.input_tokens, total.cost_usd) == (2, 2000, 0.093)


async def test_m10_6_seen_ids_expire_after_the_window(target_redis: aioredis.Redis) -> None:
    """An id older than the window is forgotten (the seen-set stays small); the set itself expires."""

    async def record(request_id: str, now_ms: int) -> bool:
        return await record_usage(
            target_redis,
            TOPOLOGY,
            "s5",
            model=SONNET,
            usage={"input_tokens": 1},
            cost_usd=0.0,
            request_id=request_id,
            dedupe_window_s=60.0,
            now_ms=now_ms,
        )

    assert await record("req_old", 1_000_000)
    assert not await record("req_old", 1_059_000)
    assert await record("req_new", 1_061_000)
    assert await target_redis.zrange(seen_key(TOPOLOGY, "s5"), 0, -1) == [b"req_new"]
    assert 0 < await target_redis.pttl(seen_key(TOPOLOGY, "s5")) <= 60_000
    usage = await read_usage(target_redis, TOPOLOGY, "s5")
    assert (usage.total.requests, usage.updated_at_ms) == (2, 1_061_000)
