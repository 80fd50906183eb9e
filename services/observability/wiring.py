"""``WorkerObservability``: the one object a worker builds to get metrics, health, logs and tracing.

Typical use in a worker module (see the lead's ``services/<worker>/worker.py``)::

    configure_process(settings, "tools")                    # logging + optional OTel, before consumers exist
    obs = WorkerObservability(settings, "tools", redis)
    consumer = BatchConsumer(..., handler=instrument_handler("tools", handler))
    obs.track_consumers(lambda: [consumer])                  # ConsumerStats → metrics, loop → /healthz
    app = AsgiFastStream(broker, asgi_routes=obs.routes(), on_startup=[obs.start], on_shutdown=[obs.stop])
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import redis.asyncio as aioredis

from services.observability.consumer_metrics import ConsumerProvider, register_consumer_collector
from services.observability.endpoints import observability_routes
from services.observability.health import Health
from services.observability.labels import WorkerType
from services.observability.logging import configure_logging
from services.observability.metrics import record_traceparent_invalid
from services.observability.stream_stats import StreamStatsPoller, WatchedStream, register_stream_stats
from services.observability.tracing import TraceparentError, WorkerTracer, configure_tracing
from services.runtime.leases import ShardLeases
from services.runtime.settings import Settings
from services.runtime.topology import (
    INGESTION_GROUP,
    NORMALIZATION_GROUP,
    TOOLS_GROUP,
    TRANSCRIPTS_GROUP,
    Topology,
)

GROUP_OF_WORKER: Final[dict[WorkerType, str]] = {
    "ingestion": INGESTION_GROUP,
    "tools": TOOLS_GROUP,
    "normalization": NORMALIZATION_GROUP,
    "transcripts": TRANSCRIPTS_GROUP,
}


def watched_streams(topology: Topology, worker: WorkerType) -> list[WatchedStream]:
    """The streams ``worker`` reads, with its group (every shard of a lane); normalization also reports
    the length of the requests stream it writes."""
    group = GROUP_OF_WORKER[worker]
    if worker == "tools":
        return [WatchedStream(topology.tool_jobs, group)]
    watched = [WatchedStream(stream, group, shard) for shard, stream in enumerate(topology.lane_streams(group))]
    if worker == "normalization":
        watched.append(WatchedStream(topology.requests, None))
    return watched


def configure_process(settings: Settings, worker: WorkerType) -> None:
    """Logging (``LOG_LEVEL``; JSON off a TTY) and, when asked for by ``OTEL_*``, an OTel tracer provider."""
    configure_logging(settings.log_level, static={"worker": worker})
    configure_tracing(f"agentbus-{worker}")


class WorkerObservability:
    """Metrics collectors, health checks, stream stats and the tracer of one worker process."""

    def __init__(
        self,
        settings: Settings,
        worker: WorkerType,
        redis: aioredis.Redis,
        *,
        progress_timeout_s: float = 60.0,
        stream_stats_interval_s: float = 15.0,
    ) -> None:
        self.settings = settings
        self.worker: WorkerType = worker
        self.topology = Topology(settings.names)
        self.watched = watched_streams(self.topology, worker)
        group_pairs = [(watched.stream, watched.group) for watched in self.watched if watched.group is not None]
        self.health = Health(redis=redis, groups=lambda: group_pairs, progress_timeout_s=progress_timeout_s)
        self.tracer = WorkerTracer(worker, on_invalid=self._count_invalid)
        self.consumer_stats = register_consumer_collector()
        self.stream_stats = register_stream_stats(
            StreamStatsPoller(redis, self.watched, interval_s=stream_stats_interval_s)
        )

    def _count_invalid(self, _error: TraceparentError) -> None:
        record_traceparent_invalid(self.worker)

    def track_consumers(self, provider: ConsumerProvider) -> None:
        """Publish these consumers' stats and check their progress in ``/healthz``."""
        self.consumer_stats.track(self.worker, provider)
        self.health.register_consumers(self.worker, provider)

    def track_leases(self, leases: ShardLeases, task: asyncio.Task[Any] | None = None) -> None:
        """Publish shards owned / lease conflicts; ``task`` (``leases.run()``) must stay alive for /healthz."""
        self.consumer_stats.track_leases(self.worker, leases)
        if task is not None:
            self.health.register_task("leases", task)

    def track_task(self, name: str, task: asyncio.Task[Any]) -> None:
        self.health.register_task(name, task)

    def routes(self) -> list[tuple[str, Any]]:
        return observability_routes(self.health)

    async def start(self) -> None:
        """Start the stream-stats poller (call from the app's startup hook)."""
        self.health.register_task("stream_stats", self.stream_stats.start())

    def begin_drain(self) -> None:
        """``/readyz`` fails from now on (call first thing on SIGTERM / shutdown)."""
        self.health.start_draining()

    async def stop(self) -> None:
        self.begin_drain()
        await self.stream_stats.stop()
