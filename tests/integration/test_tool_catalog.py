"""Issue 18, the tool catalog on a real Redis (one server and a 3-master cluster): tool workers' entries come
and go with the workers, expire when a worker stops refreshing, and are pruned without ever erasing a fresh one.
The publishers here are the ones tool workers run, in this process; ``test_tool_catalog_workers.py`` runs real
worker processes."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from agentbus_redis.runtime.redis_client import worker_redis
from agentbus_redis.stores.tool_catalog import (
    ToolCatalogCache,
    ToolCatalogPublisher,
    epoch_ms,
    prune_expired,
    read_catalog_snapshot,
    read_tool_catalog,
)
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.workers.tools.registry import default_registry
from agentbus_redis.workers.tools.workspace import Workspace
from tests.conftest import ON_EVERY_TARGET, flushed_target_url
from tests.integration.cluster import eventually
from tests.services.acl_redis import start_acl_redis

pytestmark = [pytest.mark.integration, ON_EVERY_TARGET]

TOPOLOGY = Topology(StreamNames(prefix="agentbus:", shards=4))
SCHEMA = {"type": "object", "properties": {}}
HOUR_MS = 3_600_000


def tool(name: str, description: str = "") -> ToolDefinition:
    return ToolDefinition(name=name, description=description or f"The {name} tool", input_schema=SCHEMA)


@pytest.fixture
async def target(redis_target: str, request: pytest.FixtureRequest) -> AsyncIterator[aioredis.Redis]:
    client = worker_redis(flushed_target_url(request, redis_target))
    try:
        yield client
    finally:
        await client.aclose()


def publisher(
    redis: aioredis.Redis, worker: str, *tools: ToolDefinition, clock_offset_ms: int = 0
) -> ToolCatalogPublisher:
    """A worker's publisher; ``clock_offset_ms`` shifts its clock (a negative one makes entries already expired)."""
    return ToolCatalogPublisher(
        redis, TOPOLOGY, worker=worker, tools=tools, refresh_s=10, ttl_s=30, now_ms=lambda: epoch_ms() + clock_offset_ms
    )


async def names(redis: aioredis.Redis) -> list[str]:
    return [definition.name for definition in await read_tool_catalog(redis, TOPOLOGY)]


async def fields(redis: aioredis.Redis) -> set[str]:
    return {field.decode() for field in await redis.hkeys(TOPOLOGY.tool_catalog)}


async def test_catalog_follows_tool_workers_as_they_come_and_go(target: aioredis.Redis) -> None:
    assert await read_tool_catalog(target, TOPOLOGY) == []
    first = publisher(target, "tools-a", tool("Read"), tool("Bash"))
    second = publisher(target, "tools-b", tool("Read"), tool("Agent"))
    await first.publish()
    assert await names(target) == ["Bash", "Read"]
    await second.publish()
    assert await names(target) == ["Agent", "Bash", "Read"]
    await first.withdraw()  # graceful stop: its field is removed at once
    assert await fields(target) == {"tools-b"}
    assert await names(target) == ["Agent", "Read"]
    await second.withdraw()
    assert await read_tool_catalog(target, TOPOLOGY) == []
    assert await target.exists(TOPOLOGY.tool_catalog) == 0


async def test_expired_entry_is_ignored_and_pruned(target: aioredis.Redis) -> None:
    """A worker that died stopped refreshing: its entry is past its expiry, so it is not offered and the reader
    deletes it."""
    await publisher(target, "tools-dead", tool("Bash"), clock_offset_ms=-HOUR_MS).publish()
    await publisher(target, "tools-live", tool("Read")).publish()
    assert await fields(target) == {"tools-dead", "tools-live"}
    assert await names(target) == ["Read"]
    assert await fields(target) == {"tools-live"}


async def test_prune_never_erases_an_entry_refreshed_since_it_was_read(target: aioredis.Redis) -> None:
    paused = publisher(target, "tools-paused", tool("Bash"), clock_offset_ms=-HOUR_MS)
    await paused.publish()
    stale = await read_catalog_snapshot(target, TOPOLOGY)
    assert [entry.worker for entry, _ in stale.expired] == ["tools-paused"]
    paused.now_ms = epoch_ms  # back from its pause, it refreshes before the reader prunes
    await paused.publish()
    assert await prune_expired(target, TOPOLOGY, stale) == 0
    assert await names(target) == ["Bash"]


async def test_the_most_recently_refreshed_definition_wins(target: aioredis.Redis) -> None:
    old = publisher(target, "tools-old", tool("Read", "Reads (v1)"))
    new = publisher(target, "tools-new", tool("Read", "Reads (v2)"))
    await old.publish()
    await new.publish()
    (read,) = await read_tool_catalog(target, TOPOLOGY)
    assert read.description == "Reads (v2)"
    old.now_ms = lambda: epoch_ms() + 60_000  # its next refresh is the latest
    await old.publish()
    (read,) = await read_tool_catalog(target, TOPOLOGY)
    assert read.description == "Reads (v1)"


async def test_periodic_refresh_moves_the_expiry_and_stop_removes_the_field(target: aioredis.Redis) -> None:
    worker = ToolCatalogPublisher(target, TOPOLOGY, worker="tools-p", tools=[tool("Read")], refresh_s=0.01, ttl_s=5)
    await worker.publish()
    first = (await read_catalog_snapshot(target, TOPOLOGY)).live[0]
    worker.start()

    async def refreshed() -> bool:
        return (await read_catalog_snapshot(target, TOPOLOGY)).live[0].expires_ms > first.expires_ms

    await eventually(refreshed, timeout_s=10)
    await worker.withdraw()
    assert await fields(target) == set()
    assert worker.errors == 0


async def test_invalid_field_is_reported_and_left_alone(target: aioredis.Redis) -> None:
    await target.hset(TOPOLOGY.tool_catalog, "intruder", "not json")
    await publisher(target, "tools-a", tool("Read")).publish()
    snapshot = await read_catalog_snapshot(target, TOPOLOGY)
    assert [invalid.worker for invalid in snapshot.invalid] == ["intruder"]
    assert await names(target) == ["Read"]
    assert await fields(target) == {"intruder", "tools-a"}


async def test_cache_reads_once_per_max_age(target: aioredis.Redis) -> None:
    now = [0.0]
    cache = ToolCatalogCache(target, TOPOLOGY, max_age_s=1.0, monotonic=lambda: now[0])
    await publisher(target, "tools-a", tool("Read")).publish()
    assert [t.name for t in await cache.tools()] == ["Read"]
    await publisher(target, "tools-b", tool("Bash")).publish()
    assert [t.name for t in await cache.tools()] == ["Read"]  # within max_age: the cached list
    now[0] = 1.0
    assert [t.name for t in await cache.tools()] == ["Bash", "Read"]


async def test_builtin_definitions_survive_the_round_trip(target: aioredis.Redis, tmp_path: Path) -> None:
    definitions = default_registry(Workspace.at(tmp_path)).definitions()
    await publisher(target, "tools-a", *definitions).publish()
    assert await read_tool_catalog(target, TOPOLOGY) == sorted(definitions, key=lambda definition: definition.name)


async def test_tools_acl_user_publishes_refreshes_and_withdraws(redis_target: str, tmp_path: Path) -> None:
    """deploy/redis/users.acl: the tools user may write its catalog entry, and nothing else of the hash's kind."""
    if redis_target == "cluster":
        pytest.skip("the ACL file is checked on one server (the same rules apply per node)")
    server = start_acl_redis(tmp_path / "acl")
    tools_user = worker_redis(server.url("tools"))
    operator = worker_redis(server.url("operator"))
    try:
        worker = publisher(tools_user, "tools-acl", tool("Read"))
        await worker.publish()
        await worker.publish()
        assert await names(operator) == ["Read"]
        await worker.withdraw()
        assert await fields(operator) == set()
        with pytest.raises(NoPermissionError):
            await tools_user.hset("agentbus:elsewhere", "f", "v")
    finally:
        await tools_user.aclose()
        await operator.aclose()
        server.stop()
