"""A child's record and its links (A1: the parent lists its children; A9: the deadline index; A4.4: found by
agent id) are separate writes; a tools worker killed between them, with the Agent job re-run by a peer, must still
leave the child listed. The full suite under load lost two of three children from ``children()`` that way."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.store import AgentStore
from tests.integration.child_records import child_record

pytestmark = [pytest.mark.integration]

PARENT = "link-parent"


@pytest.fixture
async def store(redis_url: str) -> AsyncIterator[AgentStore]:
    redis = aioredis.Redis.from_url(redis_url)
    try:
        yield AgentStore(redis, Topology(StreamNames(prefix="agentbus:", shards=4)))
    finally:
        await redis.aclose()


async def test_a_record_written_by_a_worker_that_died_before_its_links_is_linked_by_the_rerun(
    store: AgentStore,
) -> None:
    record = child_record(PARENT, "toolu_cut")
    await store.redis.delete(store.keys.child(record.session_id), store.keys.children(PARENT))
    # The first run got as far as the record, then its worker was SIGKILLed.
    await store.redis.hsetnx(store.keys.child(record.session_id), "record", record.to_wire_json())
    assert await store.children(PARENT) == {}
    # The re-run (launcher: the record exists) links it.
    await store.link(record)
    assert await store.children(PARENT) == {record.session_id: "toolu_cut"}
    assert await store.statuses([record.session_id]) == {record.session_id: "running"}
    running = await store.redis.zscore(store.keys.running_index_for(record.session_id), record.session_id)
    assert running == record.deadline_ms
    assert await store.find(record.agent_id) == record.session_id


async def test_linking_an_ended_child_again_keeps_its_status_and_leaves_the_deadline_index_alone(
    store: AgentStore,
) -> None:
    record = child_record(PARENT, "toolu_done")
    assert await store.register(record) is True
    await store.redis.hset(store.keys.child(record.session_id), "status", "completed")
    await store.redis.zrem(store.keys.running_index_for(record.session_id), record.session_id)
    assert await store.register(record) is False
    assert await store.statuses([record.session_id]) == {record.session_id: "completed"}
    assert await store.redis.zscore(store.keys.running_index_for(record.session_id), record.session_id) is None
