"""Ordered lanes: one ordered ``BatchConsumer`` per shard this worker holds a lease on.

``ShardLanes`` is the ``LeaseListener`` that turns lease changes into consumers: on acquisition it
starts an ordered consumer on the shard stream that first takes over every pending entry of the group
(the previous owner's batch in hand), on release it stops that consumer, which finishes and acks its
batch before the lease is deleted. The lease epoch is the consumer's fence: each batch is written (and
acked) by one script that first checks the shard's epoch key still holds it, so an owner that lost the
shard without noticing yet (paused past its lease) writes nothing once the next owner has taken over;
and a consumer reads nothing while its lease may have lapsed (``lease_valid``), so a process waking up
from a pause does not pull new entries into its pending list before its lease loop has noticed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import partial

import redis.asyncio as aioredis

from agentbus_redis.runtime.consumer import BatchConsumer, BatchHandler, ConsumerConfig, Fence
from agentbus_redis.streams.names import StreamNames

HandlerFactory = Callable[[int, int], BatchHandler]
"""(shard, lease epoch) → the batch handler for that shard while the lease lasts."""


class ShardLanes:
    """Runs the consumers of the shards of ``stream_name`` this worker owns."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: StreamNames,
        *,
        stream_name: str,
        group: str,
        consumer: str,
        handler_factory: HandlerFactory,
        config: ConsumerConfig | None = None,
        stop_timeout_s: float | None = None,
        lease_valid: Callable[[int], bool] | None = None,
    ) -> None:
        self.redis = redis
        self.names = names
        self.stream_name = stream_name
        self.group = group
        self.consumer = consumer
        self.handler_factory = handler_factory
        base = config if config is not None else ConsumerConfig()
        self.config = replace(base, ordered=True, claim_all_on_start=True)
        self.stop_timeout_s = stop_timeout_s
        self.lease_valid = lease_valid
        """shard → whether this worker's lease on it is surely still valid (``ShardLeases.holds``)."""
        self.consumers: dict[int, BatchConsumer] = {}

    async def shard_acquired(self, shard: int, epoch: int) -> None:
        await self.shard_released(shard, lost=True)
        consumer = BatchConsumer(
            self.redis,
            stream=self.names.shard_stream(shard, self.stream_name),
            group=self.group,
            consumer=self.consumer,
            handler=self.handler_factory(shard, epoch),
            config=replace(self.config, fence=Fence(self.names.lease_epoch_key(self.group, shard), str(epoch))),
            may_read=partial(self.lease_valid, shard) if self.lease_valid is not None else None,
        )
        self.consumers[shard] = consumer
        consumer.start()

    async def shard_released(self, shard: int, *, lost: bool) -> None:
        consumer = self.consumers.pop(shard, None)
        if consumer is not None:
            await consumer.stop(timeout_s=self.stop_timeout_s)

    async def stop(self) -> None:
        """Stop every consumer (use ``ShardLeases.stop`` instead to also release the leases)."""
        for shard in list(self.consumers):
            await self.shard_released(shard, lost=False)
