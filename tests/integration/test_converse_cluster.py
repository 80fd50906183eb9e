"""``converse`` on a Redis Cluster: the session's log and live reply stream share the shard's hash slot, so
the one ``XREAD`` over both works through the cluster client (issue 20). Real ingestion runs in-process on
the session's ingress shard; the model's side is played through the SDK."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.local.redis_cluster import LocalRedisCluster
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerConfig
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import TextDelta, TurnEnd
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP
from agentbus_redis.workers.ingestion.worker import IngestionWorker
from tests.integration.model_side import reply_events, request_id_of

pytestmark = pytest.mark.integration

SESSION = "converse-on-cluster"
REPLY = "Streamed through a three-master cluster, delta by delta."


@pytest.fixture
async def bus(redis_cluster: LocalRedisCluster) -> AsyncIterator[AgentbusClient]:
    redis_cluster.flushall()
    async with AgentbusClient.connect(redis_cluster.url, names=StreamNames(prefix="agentbus:", shards=4)) as client:
        yield client


async def test_converse_reads_log_and_live_deltas_in_one_slot_on_a_cluster(bus: AgentbusClient) -> None:
    shard = bus.topology.names.shard_of(SESSION)
    worker = IngestionWorker(
        bus.redis,
        bus.topology,
        tool_deadline_ms=60_000,
        internal_key=b"k",
        max_entry_bytes=DEFAULT_MAX_INGRESS_ENTRY_BYTES,
    )
    ingestion = BatchConsumer(
        bus.redis,
        stream=bus.topology.ingress(shard),
        group=INGESTION_GROUP,
        consumer="ingestion-1",
        handler=worker.handler_for(shard, 1),
        config=ConsumerConfig(count=100, block_ms=20, ordered=True, transactional=True),
    )
    ingestion.start()
    events = reply_events([TextBlock(text=REPLY)])
    request_id = request_id_of(SESSION)

    async def model_side() -> None:
        """Reply once the prompt is logged (there is no normalizer here to publish a request)."""
        async for _ in bus.follow(SESSION):
            break
        for event in events:
            await bus.send_stream_event(SESSION, request_id, event)

    model = asyncio.ensure_future(model_side())
    try:
        seen = [event async for event in bus.converse(SESSION, "hello", timeout_s=20)]
        await model
    finally:
        await ingestion.stop()
    assert "".join(e.text for e in seen if isinstance(e, TextDelta)) == REPLY
    assert isinstance(seen[-1], TurnEnd)
    assert seen[-1].stop_reason == "end_turn"
    live: Any = await bus.redis.xrange(bus.topology.live_reply(SESSION))
    assert live  # the deltas went through the live stream, not only the logged message
