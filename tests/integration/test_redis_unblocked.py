"""A blocking read that a failover ends is ridden out, not fatal (issue 25, found by `bench/soak.py --cluster`).

When a master is demoted while clients are blocked on it (a failover, or ``REPLICAOF``), Redis 7 ends their
blocking commands with ``-UNBLOCKED force unblock from blocking operation, instance state changed (master ->
replica?)``. redis-py raises that as a plain ``ResponseError``: in the cluster soak it crashed the consumer
lanes of the model and tool workers blocked on that master (``consumer_crashed``), and reached an SDK caller
of ``converse()``. It is now :class:`Unblocked`, a ``ConnectionError``, and a demoted master's ``READONLY``
is transient too, so both take the reconnect path.

Real servers, no mocks: two private ``redis-server`` processes; the one the client reads from is demoted with
``REPLICAOF`` (what a failover does to the old master) and promoted back.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.runtime.batch import BatchOutcome, ConsumerConfig
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.redis_client import TRANSIENT_ERRORS, Unblocked, connect
from agentbus_redis.streams.entries import StreamEntry
from tests.integration.cluster import eventually

pytestmark = pytest.mark.integration

STREAM, GROUP = "unblocked:s", "g"


@pytest.fixture
def pair(tmp_path: Path) -> Iterator[tuple[LocalRedis, LocalRedis]]:
    """A master the client reads from, and a server to make it a replica of."""
    servers: list[LocalRedis] = []
    try:
        servers.append(start_local_redis(tmp_path / "a"))
        servers.append(start_local_redis(tmp_path / "b"))
        yield servers[0], servers[1]
    finally:
        for server in servers:
            server.stop()


async def blocked_clients(admin: aioredis.Redis) -> int:
    info = await admin.info("clients")
    return int(info["blocked_clients"])


async def demote(admin: aioredis.Redis, to: LocalRedis) -> None:
    await admin.execute_command("REPLICAOF", "127.0.0.1", str(to.port))


async def test_a_blocked_read_ended_by_a_demotion_is_a_connection_error_and_the_client_goes_on(
    pair: tuple[LocalRedis, LocalRedis],
) -> None:
    master, other = pair
    # No retries in the client, to see what one read gets: redis-py's own retry would send it again at once.
    client = connect(master.url, retry=Retry(NoBackoff(), 0))
    admin = aioredis.Redis.from_url(master.url)
    try:
        await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
        read = asyncio.ensure_future(client.xreadgroup(GROUP, "c", {STREAM: ">"}, block=0))
        await eventually(lambda: _at_least_one_blocked(admin), timeout_s=30)
        await demote(admin, other)
        with pytest.raises(Unblocked, match="UNBLOCKED") as raised:
            await read
        assert isinstance(raised.value, RedisConnectionError)
        assert isinstance(raised.value, TRANSIENT_ERRORS)
        await admin.execute_command("REPLICAOF", "NO", "ONE")
        # The connection was dropped with the error: the pool's next one works (the replica sync emptied it).
        assert await client.ping()
        await client.xadd(STREAM, {"data": "after"})
        assert await client.xlen(STREAM) == 1
    finally:
        await client.aclose()
        await admin.aclose()


async def test_a_consumer_blocked_on_a_master_that_is_demoted_and_promoted_again_keeps_consuming(
    pair: tuple[LocalRedis, LocalRedis],
) -> None:
    """The lane that crashed in the soak: a worker's consumer blocked in ``XREADGROUP`` when its master is demoted.
    It rides out ``UNBLOCKED``, then the demoted node's ``READONLY``, and reads again once a master is back."""
    master, other = pair
    client = connect(master.url)
    admin = aioredis.Redis.from_url(master.url)
    seen: list[StreamEntry] = []

    async def record(batch: list[StreamEntry]) -> BatchOutcome:
        seen.extend(batch)
        return BatchOutcome()

    consumer = BatchConsumer(
        client,
        stream=STREAM,
        group=GROUP,
        consumer="c1",
        handler=record,
        config=ConsumerConfig(block_ms=60_000, claim_interval_s=3600.0),
    )
    task = consumer.start()
    try:
        await client.xadd(STREAM, {"data": "before"})
        await eventually(lambda: _seen(seen, 1), timeout_s=30)
        await eventually(lambda: _at_least_one_blocked(admin), timeout_s=30)
        await demote(admin, other)
        await eventually(lambda: _errors_seen(consumer), timeout_s=30)
        await admin.execute_command("REPLICAOF", "NO", "ONE")
        await admin.xadd(STREAM, {"data": "after"})
        await eventually(lambda: _seen(seen, 2), timeout_s=60)
        assert [entry.fields["data"] for entry in seen] == [b"before", b"after"]
        assert consumer.failure is None
        assert not task.done()
    finally:
        await consumer.stop(timeout_s=5)
        # Blocked for up to block_ms (no socket timeout: runtime/redis_client.py), the consumer is cancelled by stop.
        with contextlib.suppress(Exception, asyncio.CancelledError):
            await task
        await client.aclose()
        await admin.aclose()


async def _at_least_one_blocked(admin: aioredis.Redis) -> bool:
    return await blocked_clients(admin) >= 1


async def _seen(seen: list[StreamEntry], count: int) -> bool:
    return len(seen) >= count


async def _errors_seen(consumer: BatchConsumer) -> bool:
    return consumer.stats.connection_errors >= 1
