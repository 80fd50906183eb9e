"""A worker type that owns shards of an ordered lane: leases decide the shards, one ordered consumer
per owned shard reads them (``ShardLanes``)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis

from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerConfig
from agentbus_redis.runtime.lanes import HandlerFactory, ShardLanes
from agentbus_redis.runtime.leases import LeaseConfig, ShardLeases
from agentbus_redis.streams.names import StreamNames

ReleaseCallback = Callable[[int], Awaitable[None] | None]
"""Told (after the shard's consumer stopped) that this worker no longer owns a shard: drop what it cached
about the shard's sessions, since the next owner will change them."""


class _ReleaseHook:
    """Forwards lease changes to the lanes and tells the worker when it lost a shard."""

    def __init__(self, lanes: ShardLanes, on_release: ReleaseCallback | None) -> None:
        self.lanes = lanes
        self.on_release = on_release

    async def shard_acquired(self, shard: int, epoch: int) -> None:
        await self.lanes.shard_acquired(shard, epoch)

    async def shard_released(self, shard: int, *, lost: bool) -> None:
        await self.lanes.shard_released(shard, lost=lost)
        if self.on_release is not None:
            outcome = self.on_release(shard)
            if inspect.isawaitable(outcome):
                await outcome


class LaneWorker:
    """Runs the shard consumers of ``stream_name`` for consumer group ``group``."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: StreamNames,
        *,
        group: str,
        stream_name: str,
        owner: str,
        handler_factory: HandlerFactory,
        consumer_config: ConsumerConfig,
        lease_config: LeaseConfig,
        on_release: ReleaseCallback | None = None,
        stop_timeout_s: float = 30.0,
    ) -> None:
        self.redis = redis
        self.names = names
        self.group = group
        self.stream_name = stream_name
        self.owner = owner
        self.lanes = ShardLanes(
            redis,
            names,
            stream_name=stream_name,
            group=group,
            consumer=owner,
            handler_factory=handler_factory,
            config=consumer_config,
            stop_timeout_s=stop_timeout_s,
            lease_valid=lambda shard: self.leases.holds(shard),
        )
        self.leases = ShardLeases(
            redis, names, lane=group, owner=owner, listener=_ReleaseHook(self.lanes, on_release), config=lease_config
        )
        self._task: asyncio.Task[None] | None = None

    @property
    def streams(self) -> list[str]:
        return self.names.shard_streams(self.stream_name)

    def consumers(self) -> list[BatchConsumer]:
        return list(self.lanes.consumers.values())

    def background_tasks(self) -> dict[str, asyncio.Task[None] | None]:
        """The lease loop: it must run as long as the worker does (``/healthz`` fails when it ended)."""
        return {f"leases:{self.group}": self._task}

    def owned_shards(self) -> list[int]:
        return sorted(self.leases.owned)

    async def start(self) -> None:
        await ensure_groups(self.redis, [(stream, self.group) for stream in self.streams])
        self._task = asyncio.create_task(self.leases.run(), name=f"leases:{self.group}:{self.owner}")

    async def stop(self) -> None:
        """Finish the batches in hand, ack them, and hand every shard back."""
        await self.leases.stop()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


async def ensure_groups(redis: aioredis.Redis, pairs: list[tuple[str, str]]) -> None:
    """Create consumer groups at id 0 with MKSTREAM (so nothing written earlier is missed); idempotent."""
    for stream, group in pairs:
        try:
            await redis.xgroup_create(stream, group, id="0", mkstream=True)
        except aioredis.ResponseError as error:
            if not str(error).startswith("BUSYGROUP"):
                raise
