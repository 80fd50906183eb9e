"""The normalization worker process: ``agentbus worker normalization``."""

from __future__ import annotations

from agentbus_redis.observability.metrics import instrument_handler
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.lane_worker import LaneWorker
from agentbus_redis.streams.topology import NORMALIZATION_GROUP
from agentbus_redis.workers.normalization.worker import NormalizationWorker
from agentbus_redis.workers.process import WorkerContext


class NormalizationRuntime:
    """Owns log shards for the normalization group."""

    def __init__(self, context: WorkerContext) -> None:
        self.worker = NormalizationWorker(
            context.redis, context.topology, max_sessions=context.settings.normalizer_max_sessions
        )
        self.lanes = LaneWorker(
            context.redis,
            context.settings.names,
            group=NORMALIZATION_GROUP,
            stream_name="log",
            owner=context.owner,
            handler_factory=lambda shard, epoch: instrument_handler(
                "normalization", self.worker.handler_for(shard, epoch)
            ),
            consumer_config=context.consumer_config(transactional=True),
            lease_config=context.lease_config(),
            on_release=self.worker.forget_shard,
        )

    async def start(self) -> None:
        await self.lanes.start()

    async def stop(self) -> None:
        await self.lanes.stop()

    def consumers(self) -> list[BatchConsumer]:
        return self.lanes.consumers()

    def groups(self) -> list[tuple[str, str]]:
        return [(stream, NORMALIZATION_GROUP) for stream in self.lanes.streams]


def create(context: WorkerContext) -> NormalizationRuntime:
    return NormalizationRuntime(context)


def __getattr__(attribute: str) -> object:
    """``faststream run agentbus_redis.workers.normalization.app:app``: the ASGI app, built from the environment on
    first use."""
    if attribute == "app":
        from agentbus_redis.workers.process import build_app

        return build_app("normalization", create)[0]
    raise AttributeError(attribute)
