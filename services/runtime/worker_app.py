"""Every worker process is a FastStream ASGI app: FastStream owns the lifecycle (startup, graceful
shutdown on SIGTERM), the pub/sub subscribers and the HTTP routes; the hot path is the batched
runtime (``BatchConsumer`` / ``LaneWorker``) started from the app's startup hook.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import redis.asyncio as aioredis
import structlog
from faststream.asgi import AsgiFastStream
from faststream.redis import RedisBroker

from services.runtime.consumer import BatchConsumer, ConsumerConfig
from services.runtime.leases import LeaseConfig
from services.runtime.redis_client import pubsub_url, worker_redis
from services.runtime.retention import StreamTrimmer, work_streams
from services.runtime.settings import Settings
from services.runtime.topology import Topology

log = structlog.get_logger(__name__)

WORKER_NAMES = ("ingestion", "tools", "normalization", "transcripts")


class WorkerRuntime(Protocol):
    """What a worker type provides to the process around it."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def consumers(self) -> list[BatchConsumer]:
        """The consume loops running now (for health and metrics)."""
        ...

    def groups(self) -> list[tuple[str, str]]:
        """(stream, group) pairs this worker reads; readiness requires them to exist."""
        ...


@dataclass(slots=True)
class WorkerContext:
    """What a worker factory gets: configuration and the connections of its process."""

    name: str
    settings: Settings
    redis: aioredis.Redis
    broker: RedisBroker
    owner: str

    @property
    def topology(self) -> Topology:
        return Topology(self.settings.names)

    def consumer_config(self, **overrides: object) -> ConsumerConfig:
        c = self.settings.consumer
        base = ConsumerConfig(
            count=c.count,
            block_ms=c.block_ms,
            claim_min_idle_ms=c.claim_min_idle_ms,
            claim_interval_s=c.claim_interval_s,
            max_deliveries=c.max_deliveries,
        )
        return replace(base, **overrides)  # type: ignore[arg-type]

    def lease_config(self) -> LeaseConfig:
        return LeaseConfig(
            ttl_ms=self.settings.lane.lease_ttl_ms, renew_interval_ms=self.settings.lane.renew_interval_ms
        )


WorkerFactory = Callable[[WorkerContext], WorkerRuntime]
RouteFactory = Callable[["WorkerProcess"], Sequence[tuple[str, object]]]


def process_owner(name: str) -> str:
    """A unique consumer / lease-owner name for this process: ``<worker>-<host>-<pid>-<random>``."""
    return f"{name}-{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


@dataclass(slots=True)
class WorkerProcess:
    """One worker process: its settings, connections and runtime, built and torn down by the app."""

    name: str
    settings: Settings
    factory: WorkerFactory
    broker: RedisBroker
    owner: str
    redis: aioredis.Redis | None = None
    runtime: WorkerRuntime | None = None
    trimmer: StreamTrimmer | None = None
    draining: bool = False

    async def startup(self) -> None:
        self.redis = worker_redis(self.settings.redis_url)
        context = WorkerContext(self.name, self.settings, self.redis, self.broker, self.owner)
        self.runtime = self.factory(context)
        await self.runtime.start()
        retention = self.settings.retention
        if retention.enabled:
            # Each worker type trims the work streams it reads (both log readers do: harmless, idempotent).
            reads = {stream for stream, _ in self.runtime.groups()}
            targets = [target for target in work_streams(context.topology) if target.stream in reads]
            self.trimmer = StreamTrimmer(
                self.redis, targets, keep_acked_ms=int(retention.keep_acked_s * 1000), interval_s=retention.interval_s
            )
            self.trimmer.start()
        # Which loop runs matters (uvloop's C transports cost far less per round trip): say it once.
        loop = type(asyncio.get_running_loop())
        log.info("worker_started", worker=self.name, owner=self.owner, event_loop=f"{loop.__module__}.{loop.__name__}")

    async def shutdown(self) -> None:
        """SIGTERM: stop reading, finish and ack the batch in hand, release shards, close connections."""
        self.draining = True
        if self.trimmer is not None:
            await self.trimmer.stop()
        if self.runtime is not None:
            await self.runtime.stop()
        if self.redis is not None:
            await self.redis.aclose()


def build_app(
    name: str,
    factory: WorkerFactory,
    *,
    settings: Settings | None = None,
    routes: RouteFactory | None = None,
) -> tuple[AsgiFastStream, WorkerProcess]:
    """The ASGI app of worker ``name`` (run it with uvicorn, or ``faststream run``)."""
    resolved = settings if settings is not None else Settings()
    # logger=None: FastStream's per-message INFO logging costs ~100 µs a message (baseline §5).
    broker = RedisBroker(pubsub_url(resolved.redis_url), logger=None)  # type: ignore[arg-type]
    process = WorkerProcess(name=name, settings=resolved, factory=factory, broker=broker, owner=process_owner(name))
    from services.observability.wiring import WorkerObservability

    observability = WorkerObservability.for_process(process)
    asgi_routes = [*observability.routes(), *(routes(process) if routes is not None else [])]
    app = AsgiFastStream(
        broker,
        asgi_routes=asgi_routes,
        logger=None,
        on_startup=[process.startup],
        after_startup=[observability.start],
        # Stop the stream-stats poller (and fail /readyz) before the process closes its Redis client.
        on_shutdown=[observability.stop, process.shutdown],
    )
    return app, process
