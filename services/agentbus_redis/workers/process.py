"""Every worker process is a FastStream ASGI app: FastStream owns the lifecycle (startup, graceful
shutdown on SIGTERM), the pub/sub subscribers and the HTTP routes; the hot path is the batched
runtime (``BatchConsumer`` / ``LaneWorker``) started from the app's startup hook.

A worker may start before Redis answers (containers start together; Redis restarts): the startup hook
builds the runtime and returns, so ``/healthz`` and ``/readyz`` (not ready) are served at once, and a task
starts the runtime once Redis answers, retrying with backoff and logging one line per attempt. The broker
that carries the runtime's pub/sub subscriptions is started by that task too (FastStream's own start would
fail the app while Redis is down); the app's lifecycle broker subscribes to nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from redis.exceptions import BusyLoadingError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from agentbus_redis.config.settings import Settings
from agentbus_redis.observability.tracing import flush_tracing
from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerConfig
from agentbus_redis.runtime.leases import LeaseConfig
from agentbus_redis.runtime.redis_client import pubsub_url, worker_redis
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.retention import StreamTrimmer, work_streams

log = structlog.get_logger(__name__)

WORKER_NAMES = ("ingestion", "tools", "normalization", "transcripts", "model")

REDIS_DOWN = (RedisConnectionError, RedisTimeoutError, BusyLoadingError, OSError)
"""What Redis answers (or not) while it is down, starting, or loading its data set."""
START_RETRY_INITIAL_S = 0.1
START_RETRY_MAX_S = 5.0


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
    """The runtime's pub/sub subscriptions; started once Redis answers (not by FastStream)."""
    owner: str
    redis: aioredis.Redis | None = None
    runtime: WorkerRuntime | None = None
    trimmer: StreamTrimmer | None = None
    draining: bool = False
    starting: asyncio.Task[None] | None = None
    """Starts the runtime once Redis answers; done (without error) once the worker serves."""

    async def startup(self) -> None:
        """Build the runtime and return: it is started by :attr:`starting` once Redis answers."""
        self.redis = worker_redis(self.settings.redis_url)
        context = WorkerContext(self.name, self.settings, self.redis, self.broker, self.owner)
        self.runtime = self.factory(context)
        self.starting = asyncio.create_task(
            self._start_when_redis_answers(self.redis, self.runtime), name=f"start:{self.name}"
        )

    async def _start_when_redis_answers(self, redis: aioredis.Redis, runtime: WorkerRuntime) -> None:
        """Start ``runtime``, retrying while Redis is down (one log line per attempt, no traceback). Every
        runtime's ``start`` creates its consumer groups before it starts anything, so a failed attempt left
        nothing running. Any other error is logged and ends the task (``/healthz`` then fails)."""
        delay = START_RETRY_INITIAL_S
        attempt = 0
        while True:
            attempt += 1
            try:
                await redis.ping()
                await self.broker.start()
                await runtime.start()
                break
            except REDIS_DOWN as error:
                log.warning(
                    "redis_unavailable_at_start", worker=self.name, attempt=attempt, retry_in_s=delay, error=str(error)
                )
                with contextlib.suppress(Exception):
                    await self.broker.stop()
            except Exception:
                log.exception("worker_start_failed", worker=self.name, attempt=attempt)
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, START_RETRY_MAX_S)
        retention = self.settings.retention
        if retention.enabled:
            # Each worker type trims the work streams it reads (both log readers do: harmless, idempotent).
            reads = {stream for stream, _ in runtime.groups()}
            streams = work_streams(Topology(self.settings.names), tool_pools=(self.settings.tools.pool,))
            targets = [target for target in streams if target.stream in reads]
            self.trimmer = StreamTrimmer(
                redis, targets, keep_acked_ms=int(retention.keep_acked_s * 1000), interval_s=retention.interval_s
            )
            self.trimmer.start()
        # Which loop runs matters (uvloop's C transports cost far less per round trip): say it once.
        loop = type(asyncio.get_running_loop())
        log.info(
            "worker_started",
            worker=self.name,
            owner=self.owner,
            event_loop=f"{loop.__module__}.{loop.__name__}",
            attempts=attempt,
        )

    async def shutdown(self) -> None:
        """SIGTERM: stop reading, finish and ack the batch in hand, release shards, close connections."""
        self.draining = True
        if self.starting is not None and not self.starting.done():
            # Still waiting for Redis: nothing runs yet, so there is nothing to finish.
            self.starting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.starting
            self.runtime = None
        if self.trimmer is not None:
            await self.trimmer.stop()
        if self.runtime is not None:
            await self.runtime.stop()
        try:
            await self.broker.stop()
        except Exception as error:  # Redis is away: the subscriptions ended with their connection anyway
            log.warning("pubsub_stop_failed", worker=self.name, error=_one_line(error))
        if self.redis is not None:
            await self.redis.aclose()


def _one_line(error: BaseException) -> str:
    """An error (an exception group: its first leaf) as one line, for a warning without a traceback."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return f"{type(error).__name__}: {error}"[:300]


async def flush_spans() -> None:
    """The last step of a graceful stop: export the spans still batched (``flush_tracing``), off the loop (an
    exporter posts synchronously)."""
    try:
        await asyncio.to_thread(flush_tracing)
    except Exception:  # an unreachable collector must not turn a clean stop into a failed one
        log.warning("span_flush_failed", exc_info=True)


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
    from agentbus_redis.observability.wiring import WorkerObservability

    observability = WorkerObservability.for_process(process)
    asgi_routes = [*observability.routes(), *(routes(process) if routes is not None else [])]
    app = AsgiFastStream(
        # FastStream's lifecycle wants a broker; it subscribes to nothing, so starting it needs no Redis.
        RedisBroker(pubsub_url(resolved.redis_url), logger=None),  # type: ignore[arg-type]
        asgi_routes=asgi_routes,
        logger=None,
        on_startup=[process.startup],
        after_startup=[observability.start],
        # Stop the stream-stats poller (and fail /readyz) before the process closes its Redis client; export the
        # spans still batched last (those of the batch the shutdown finished included).
        on_shutdown=[observability.stop, process.shutdown, flush_spans],
    )
    return app, process
