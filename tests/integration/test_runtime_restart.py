"""The consume loop survives a Redis restart (AOF on) without losing acknowledged or pending work."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig, Output
from agentbus_redis.streams.entries import StreamEntry

pytestmark = pytest.mark.integration

STREAM = "agentbus:test:in"
OUT = "agentbus:test:out"
GROUP = "workers"


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 15.0) -> None:
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.01)


@pytest.fixture
def aof_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    server = start_local_redis(tmp_path / "redis", appendonly=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(aof_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    # No client-level retries: the consumer's own backoff loop must do the work.
    connection = aioredis.Redis.from_url(aof_redis.url, retry=Retry(NoBackoff(), 0))
    try:
        yield connection
    finally:
        await connection.aclose()


async def produce(url: str, seqs: range) -> None:
    """Write from a fresh connection (the consumer's client is the one under test)."""
    producer = aioredis.Redis.from_url(url)
    try:
        pipe = producer.pipeline(transaction=False)
        for seq in seqs:
            pipe.xadd(STREAM, {"seq": seq})
        await pipe.execute()
    finally:
        await producer.aclose()


async def test_consumer_survives_redis_restart(aof_redis: LocalRedis, client: aioredis.Redis) -> None:
    """Connection errors → backoff and retry; group, pending list and acks survive in the AOF; every entry
    written before and after the restart reaches the output stream (at-least-once)."""
    seen: list[int] = []

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        seen.extend(int(entry.fields["seq"]) for entry in batch)
        return BatchOutcome(outputs=[Output(OUT, {"seq": entry.fields["seq"]}) for entry in batch])

    config = ConsumerConfig(block_ms=50, claim_interval_s=60.0, backoff_initial_s=0.02, backoff_max_s=0.2)
    consumer = BatchConsumer(client, stream=STREAM, group=GROUP, consumer="c1", handler=handle, config=config)
    consumer.start()
    await produce(aof_redis.url, range(100))
    await wait_until(lambda: consumer.stats.acked == 100)

    await asyncio.to_thread(aof_redis.restart)
    await produce(aof_redis.url, range(100, 200))
    await wait_until(lambda: consumer.stats.acked >= 200)
    await consumer.stop()

    assert consumer.stats.connection_errors >= 1
    assert set(seen) == set(range(200))
    summary = await client.xpending(STREAM, GROUP)
    assert summary["pending"] == 0
    written: Any = await client.xrange(OUT)
    out = {int(fields[b"seq"]) for _, fields in written}
    assert out == set(range(200))


async def test_entries_in_hand_at_restart_are_processed_after_it(aof_redis: LocalRedis, client: aioredis.Redis) -> None:
    """A batch read but not yet acked when Redis goes down stays pending in the AOF and is re-processed
    from the consumer's own pending list once Redis is back."""
    in_hand = asyncio.Event()
    release = asyncio.Event()
    attempts: list[tuple[int, int]] = []

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        attempts.extend((int(entry.fields["seq"]), entry.delivery_count) for entry in batch)
        in_hand.set()
        await release.wait()
        return BatchOutcome(outputs=[Output(OUT, {"seq": entry.fields["seq"]}) for entry in batch])

    config = ConsumerConfig(block_ms=50, claim_interval_s=60.0, backoff_initial_s=0.02, backoff_max_s=0.2)
    consumer = BatchConsumer(client, stream=STREAM, group=GROUP, consumer="c1", handler=handle, config=config)
    await produce(aof_redis.url, range(5))
    consumer.start()
    await in_hand.wait()
    await asyncio.to_thread(aof_redis.restart)
    release.set()  # the pipeline of this batch now meets a dead connection
    await wait_until(lambda: consumer.stats.acked == 5)
    await consumer.stop()

    assert attempts[:5] == [(seq, 1) for seq in range(5)]
    assert attempts[5:] == [(seq, 2) for seq in range(5)]
    assert (await client.xpending(STREAM, GROUP))["pending"] == 0
