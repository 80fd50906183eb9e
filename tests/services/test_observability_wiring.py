"""WorkerObservability around a worker process: routes, stream stats, consumer and lease metrics."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from agentbus_redis.config.settings import Settings
from agentbus_redis.observability.stream_stats import unregister_stream_stats
from agentbus_redis.observability.wiring import (
    WorkerObservability,
    leases_of,
    shard_of_stream,
    watched_streams,
    worker_type,
)
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig
from agentbus_redis.runtime.leases import ShardLeases
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from tests.services.test_observability_health import call


@dataclass
class FakeLanes:
    leases: ShardLeases


@dataclass
class FakeRuntime:
    loops: list[BatchConsumer]
    pairs: list[tuple[str, str]]
    lanes: FakeLanes | None = None

    def consumers(self) -> list[BatchConsumer]:
        return self.loops

    def groups(self) -> list[tuple[str, str]]:
        return self.pairs


@dataclass
class FakeProcess:
    name: str
    settings: Settings
    redis: aioredis.Redis | None = None
    runtime: Any = None
    draining: bool = False
    extra: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(autouse=True)
def _no_leftover_poller() -> Iterator[None]:
    yield
    unregister_stream_stats()


def test_helpers() -> None:
    assert shard_of_stream("agentbus:{s07}:log") == 7
    assert shard_of_stream("agentbus:tools:jobs") is None
    watched = watched_streams([("agentbus:{s01}:log", "transcripts")], ["agentbus:requests"])
    assert [(w.stream, w.group, w.shard) for w in watched] == [
        ("agentbus:{s01}:log", "transcripts", 1),
        ("agentbus:requests", None, None),
    ]
    assert worker_type("tools") == "tools"
    with pytest.raises(ValueError, match="unknown worker type"):
        worker_type("session-123")
    assert leases_of(object()) is None


async def test_for_process_serves_health_and_publishes_stats(aredis: aioredis.Redis) -> None:
    settings = Settings(_env_file=None, shards=2)
    names = StreamNames(prefix=settings.prefix, shards=2)
    pairs = [(stream, "normalization") for stream in names.shard_streams("log")]
    process = FakeProcess("normalization", settings)
    observability = WorkerObservability.for_process(process)
    app_routes = dict(observability.routes())
    assert set(app_routes) == {"/healthz", "/readyz", "/metrics"}

    async def handler(entries: list[StreamEntry]) -> BatchOutcome:
        return BatchOutcome()

    # Before startup: alive (no loops yet) but not ready (no Redis client yet).
    assert (await call(app_routes["/healthz"], "/healthz"))[0] == 200
    assert (await call(app_routes["/readyz"], "/readyz"))[0] == 503
    with pytest.raises(RuntimeError, match="after the worker connected"):
        await observability.start()

    consumer = BatchConsumer(
        aredis, stream=pairs[0][0], group="normalization", consumer="n1", handler=handler, config=ConsumerConfig()
    )
    await consumer.ensure_group()
    await aredis.xgroup_create(pairs[1][0], "normalization", id="0", mkstream=True)
    leases = ShardLeases(aredis, names, lane="normalization", owner="n1")
    await leases.tick()
    process.redis = aredis
    process.runtime = FakeRuntime([consumer], pairs, FakeLanes(leases))
    await observability.start()
    try:
        assert (await call(app_routes["/readyz"], "/readyz"))[0] == 200
        labels = {"stream": "log", "group": "normalization", "shard": "1"}
        assert REGISTRY.get_sample_value("agentbus_stream_group_present", labels) == 1
        assert REGISTRY.get_sample_value("agentbus_stream_length", {"stream": "requests", "shard": "0"}) == 0
        owned = REGISTRY.get_sample_value(
            "agentbus_lane_shards_owned", {"worker": "normalization", "lane": "normalization"}
        )
        assert owned == 2
        consumers = REGISTRY.get_sample_value(
            "agentbus_consumers", {"worker": "normalization", "stream": "log", "group": "normalization"}
        )
        assert consumers == 1
        process.draining = True
        status, body, _ = await call(app_routes["/readyz"], "/readyz")
        assert status == 503
        assert isinstance(body, dict)
        assert body["checks"]["draining"]["ok"] is False
    finally:
        await observability.stop()
        await leases.stop()
        process.runtime = None
    assert observability.health.draining


def test_tool_workers_tolerate_long_jobs_in_liveness() -> None:
    settings = Settings(_env_file=None)
    tools = WorkerObservability.for_process(FakeProcess("tools", settings))
    lanes = WorkerObservability.for_process(FakeProcess("ingestion", settings))
    assert tools.health.progress_timeout_s >= settings.tools.deadline_s
    assert lanes.health.progress_timeout_s == 60.0
