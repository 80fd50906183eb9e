"""The model worker process: ``agentbus worker model`` (run as many as you like).

Competing consumers of every shard's request notices (group ``model``), one consumer per shard stream
sharing the worker's call slots (``max_concurrent_calls``), plus a subscription to the interrupts channel.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace

from anthropic import AsyncAnthropic

from agentbus_redis.config.settings import Settings
from agentbus_redis.model.request import ModelDefaults
from agentbus_redis.observability.metrics import instrument_handler
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.lane_worker import ensure_groups
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.stores.price_table import load_price_table
from agentbus_redis.stores.token_bucket import TokenBucket
from agentbus_redis.stores.tool_catalog import catalog_reader
from agentbus_redis.streams.topology import MODEL_GROUP
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.workers.model.api_key import require_api_key
from agentbus_redis.workers.model.worker import ModelWorker
from agentbus_redis.workers.process import WorkerContext

SHUTDOWN_GRACE_S = 30.0
"""How long a stopping worker lets its calls finish; the rest are cancelled and their notices redelivered."""


def model_client(settings: Settings) -> AsyncAnthropic:
    """M1.2: the SDK's own retries off (the worker retries, M4), our timeout, the configured base URL."""
    return AsyncAnthropic(
        api_key=require_api_key(settings),
        base_url=settings.model.base_url,
        max_retries=0,
        timeout=settings.model.request_timeout_s,
    )


def model_defaults(settings: Settings) -> ModelDefaults:
    model = settings.model
    return ModelDefaults(
        model=model.model,
        fallback_model=model.fallback_model,
        max_tokens=model.max_tokens,
        capped_default_max_tokens=model.capped_default_max_tokens,
        system_prompt=model.system_prompt,
        thinking=model.thinking,  # type: ignore[arg-type]
        temperature=model.temperature,
        device_id=model.device_id,
    )


class ModelRuntime:
    """See the module docstring."""

    def __init__(self, context: WorkerContext) -> None:
        settings = context.settings
        self.context = context
        self.topology = context.topology
        self.slots = JobSlots(context.redis, group=MODEL_GROUP, size=settings.model.max_concurrent_calls)
        claim_idle_ms = settings.consumer.claim_min_idle_ms
        keepalive_s = max(min(claim_idle_ms, settings.model.session_lease_ms) / 3000, 0.05)
        self.client = model_client(settings)
        self.catalog = catalog_reader(context.redis, self.topology, refresh_s=settings.tools.catalog_refresh_s)
        self.worker = ModelWorker(
            context.redis,
            self.topology,
            consumer=context.owner,
            settings=settings.model,
            client=self.client,
            defaults=model_defaults(settings),
            tools=self._tools,
            prices=load_price_table(settings.pricing),
            internal_key=settings.require_internal_key(),
            slots=self.slots,
            keepalive_s=keepalive_s,
            bucket=TokenBucket(context.redis, context.topology.names, settings.rate_limit),
            max_deliveries=settings.consumer.max_deliveries,
        )
        base = context.consumer_config()
        handler = instrument_handler("model", self.worker.handle)
        config = replace(base, count=1, claim_max_pages=base.claim_max_pages * settings.model.max_concurrent_calls)
        self.notices = [
            BatchConsumer(
                context.redis, stream=stream, group=MODEL_GROUP, consumer=context.owner, handler=handler, config=config
            )
            for stream in self.topology.request_streams()
        ]
        self.slots.stats = self.notices[0].stats
        context.broker.subscriber(channel=self.topology.interrupts_channel)(self._on_interrupt)

    async def _tools(self) -> Sequence[ToolDefinition]:
        return await self.catalog.tools()

    async def _on_interrupt(self, session_id: str) -> None:
        """An interrupt for ``session_id`` (published by ingestion): abort its call in flight now."""
        self.worker.interrupt_session(session_id)

    async def start(self) -> None:
        await ensure_groups(self.context.redis, self.groups())
        for consumer in self.notices:
            consumer.start()

    async def stop(self) -> None:
        """Stop reading, let the calls in flight finish (cancelled after a grace time: their notices stay
        pending and another worker serves them, tombstoning what was streamed)."""
        self.slots.close()
        await asyncio.gather(*(notices.stop(timeout_s=SHUTDOWN_GRACE_S) for notices in self.notices))
        await self.slots.finish(timeout_s=SHUTDOWN_GRACE_S)
        await self.client.close()

    def consumers(self) -> list[BatchConsumer]:
        return list(self.notices)

    def groups(self) -> list[tuple[str, str]]:
        return [(notices.stream, MODEL_GROUP) for notices in self.notices]


def create(context: WorkerContext) -> ModelRuntime:
    return ModelRuntime(context)


def __getattr__(attribute: str) -> object:
    """``faststream run agentbus_redis.workers.model.app:app``: the ASGI app, built from the environment on first
    use."""
    if attribute == "app":
        from agentbus_redis.workers.process import build_app

        return build_app("model", create)[0]
    raise AttributeError(attribute)
