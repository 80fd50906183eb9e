"""Who may read and write a session's usage under deploy/redis/users.acl: a producer (the SDK's
``AgentbusClient.usage``, ``agentbus usage``) reads it and cannot change it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.stores.usage import record_usage
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from tests.services.acl_redis import AclRedis, start_acl_redis

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames())


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[AclRedis]:
    server = start_acl_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


async def test_m10_5_a_producer_reads_usage_and_cannot_write_it(acl_redis: AclRedis) -> None:
    operator = aioredis.Redis.from_url(acl_redis.url("operator"))
    producer = AgentbusClient(aioredis.Redis.from_url(acl_redis.url("producer")), TOPOLOGY)
    try:
        await record_usage(operator, TOPOLOGY, "s1", model="claude-haiku-4-5", usage={"output_tokens": 5}, cost_usd=0.1)
        usage = await producer.usage("s1")
        assert (usage.total.requests, usage.total.output_tokens) == (1, 5)
        with pytest.raises(NoPermissionError):
            await record_usage(producer.redis, TOPOLOGY, "s1", model="m", usage={}, cost_usd=1.0)
        assert (await producer.usage("s1")).total.requests == 1
    finally:
        await operator.aclose()
        await producer.close()
