"""``WorkerObservability``: what one worker process builds to get metrics, health, stream stats and tracing.

It adapts to the process around the worker through small sources (callables read on demand), so it can
be built before Redis is connected and before the runtime exists. With the lead's ``WorkerProcess``
(``workers/process.py``)::

    configure_process(settings, name)                  # first: logging + optional OTel tracer provider
    app, process = build_app(name, factory, settings=settings, routes=None)
    obs = WorkerObservability.for_process(process)
    app = AsgiFastStream(broker, asgi_routes=obs.routes(), on_startup=[process.startup],
                         after_startup=[obs.start], on_shutdown=[obs.begin_drain, process.shutdown],
                         after_shutdown=[obs.stop])
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final, Protocol

import redis.asyncio as aioredis

from agentbus_redis.config.settings import Settings
from agentbus_redis.observability.consumer_metrics import ConsumerProvider, register_consumer_collector
from agentbus_redis.observability.endpoints import observability_routes
from agentbus_redis.observability.health import GroupSource, Health, RedisSource, StartupSource, TaskSource
from agentbus_redis.observability.labels import WORKER_TYPES, WorkerType
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.observability.metrics import record_traceparent_invalid, recording, set_recording
from agentbus_redis.observability.stream_stats import StreamStatsPoller, WatchedStream, register_stream_stats
from agentbus_redis.observability.tracing import TraceparentError, WorkerTracer, configure_tracing
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.leases import ShardLeases
from agentbus_redis.streams.topology import Topology

_SHARD_TAG: Final = re.compile(r"\{s(\d+)(?:-\d+)?\}")

DEFAULT_PROGRESS_TIMEOUT_S: Final = 60.0


class WorkerRuntimeLike(Protocol):
    def consumers(self) -> list[BatchConsumer]: ...

    def groups(self) -> list[tuple[str, str]]: ...


class WorkerProcessLike(Protocol):
    """What :meth:`WorkerObservability.for_process` reads from the process (``WorkerProcess`` fits)."""

    @property
    def name(self) -> str: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def redis(self) -> aioredis.Redis | None: ...

    @property
    def runtime(self) -> Any: ...

    @property
    def draining(self) -> bool: ...


def worker_type(name: str) -> WorkerType:
    """``name`` as a ``WorkerType``; raises ``ValueError`` for anything else (it becomes a label)."""
    if name not in WORKER_TYPES:
        msg = f"unknown worker type {name!r}; expected one of {', '.join(WORKER_TYPES)}"
        raise ValueError(msg)
    return name


def shard_of_stream(stream: str) -> int | None:
    """The shard number in a stream name's hash tag (``agentbus:{s03-41}:log`` → 3), None when unsharded."""
    match = _SHARD_TAG.search(stream)
    return int(match.group(1)) if match else None


def watched_streams(pairs: Sequence[tuple[str, str]], extra_streams: Sequence[str] = ()) -> list[WatchedStream]:
    """Stream-stats targets: every (stream, group) the worker reads, plus length-only ``extra_streams``."""
    watched = [WatchedStream(stream, group, shard_of_stream(stream)) for stream, group in pairs]
    watched += [WatchedStream(stream, None, shard_of_stream(stream)) for stream in extra_streams]
    return watched


def readiness_notes(runtime: object) -> list[tuple[str, bool, str]]:
    """What a runtime adds to ``/readyz`` (its ``readiness_notes()``, e.g. the tool worker's sandbox state)."""
    notes = getattr(runtime, "readiness_notes", None)
    return list(notes()) if callable(notes) else []


def leases_of(runtime: object) -> ShardLeases | None:
    """The ``ShardLeases`` of a lane runtime: ``runtime.leases()`` when it offers one, else
    ``runtime.lanes.leases`` (``LaneWorker``); None for the unordered tool workers."""
    provider = getattr(runtime, "leases", None)
    candidate = provider() if callable(provider) else getattr(getattr(runtime, "lanes", None), "leases", None)
    return candidate if isinstance(candidate, ShardLeases) else None


def background_tasks_of(process: object) -> dict[str, asyncio.Task[Any] | None]:
    """The background tasks of a worker process that must run as long as it does: its runtime's
    (``runtime.background_tasks()``, else its lane worker's: the lease loop) and the stream trimmer's."""
    runtime = getattr(process, "runtime", None)
    provider = getattr(runtime, "background_tasks", None) or getattr(
        getattr(runtime, "lanes", None), "background_tasks", None
    )
    tasks: dict[str, asyncio.Task[Any] | None] = dict(provider()) if callable(provider) else {}
    trimmer = getattr(process, "trimmer", None)
    if trimmer is not None:
        tasks["stream_trimmer"] = trimmer.task
    return tasks


def configure_process(settings: Settings, worker: str) -> None:
    """Logging (``LOG_LEVEL``; JSON off a TTY) and, when ``OTEL_TRACES_EXPORTER`` asks, an OTel provider.

    Call before consumers are built: they bind their loggers when constructed.
    """
    configure_logging(settings.log_level, static={"worker": worker})
    configure_tracing(f"agentbus-{worker}")
    set_recording(settings.metrics)


class WorkerObservability:
    """Metrics collectors, ``/healthz`` + ``/readyz`` + ``/metrics``, stream stats and the tracer."""

    def __init__(
        self,
        settings: Settings,
        worker: str,
        *,
        redis: RedisSource,
        groups: GroupSource,
        consumers: ConsumerProvider,
        draining: Callable[[], bool] | None = None,
        startup: StartupSource | None = None,
        leases: Callable[[], ShardLeases | None] | None = None,
        tasks: TaskSource | None = None,
        notes: Callable[[], Iterable[tuple[str, bool, str]]] | None = None,
        progress_timeout_s: float = DEFAULT_PROGRESS_TIMEOUT_S,
        stream_stats_interval_s: float = 15.0,
    ) -> None:
        self.settings = settings
        self.worker = worker_type(worker)
        self.topology = Topology(settings.names)
        self._redis = redis
        self._groups = groups
        self._leases = leases
        if self.worker == "tools":
            # A tool worker's consume loop waits for a free slot while every slot runs a job, which may take
            # up to the tool deadline: a shorter limit would restart a pod in the middle of long tools.
            progress_timeout_s = max(progress_timeout_s, settings.tools.deadline_s)
        self.health = Health(redis=redis, groups=groups, progress_timeout_s=progress_timeout_s)
        if draining is not None:
            self.health.draining_source = draining
        if startup is not None:
            self.health.startup = startup
        if tasks is not None:
            self.health.register_task_source(tasks)
        if notes is not None:
            self.health.notes = notes
        self.health.register_consumers(self.worker, consumers)
        self.consumer_stats = register_consumer_collector()
        self.consumer_stats.track(self.worker, consumers)
        self.tracer = WorkerTracer(self.worker, on_invalid=self._count_invalid)
        self.stream_stats_interval_s = stream_stats_interval_s
        self.stream_stats: StreamStatsPoller | None = None

    @classmethod
    def for_process(cls, process: WorkerProcessLike, **options: Any) -> WorkerObservability:
        """Observe a ``WorkerProcess``: its client, its runtime's consumers and groups, its draining flag."""

        def consumers() -> list[BatchConsumer]:
            runtime = process.runtime
            return list(runtime.consumers()) if runtime is not None else []

        def groups() -> list[tuple[str, str]]:
            runtime = process.runtime
            return list(runtime.groups()) if runtime is not None else []

        return cls(
            process.settings,
            process.name,
            redis=lambda: process.redis,
            groups=groups,
            consumers=consumers,
            draining=lambda: process.draining,
            startup=lambda: getattr(process, "starting", None),
            leases=lambda: leases_of(process.runtime),
            tasks=lambda: background_tasks_of(process),
            notes=lambda: readiness_notes(process.runtime),
            **options,
        )

    def _count_invalid(self, _error: TraceparentError) -> None:
        record_traceparent_invalid(self.worker)

    def track_leases(self, leases: ShardLeases, task: asyncio.Task[Any] | None = None) -> None:
        """Publish shards owned / lease conflicts; ``task`` (``leases.run()``) must stay alive for /healthz."""
        self.consumer_stats.track_leases(self.worker, leases)
        if task is not None:
            self.health.register_task("leases", task)

    def track_task(self, name: str, task: asyncio.Task[Any]) -> None:
        """A background task whose death makes ``/healthz`` fail (while not draining)."""
        self.health.register_task(name, task)

    def routes(self) -> list[tuple[str, Any]]:
        """``/healthz``, ``/readyz``, ``/metrics`` for ``AsgiFastStream(asgi_routes=...)``."""
        return observability_routes(self.health)

    async def start(self) -> None:
        """After the worker started (Redis connected, groups known): start the stream-stats poller."""
        redis = self._redis()
        if redis is None:
            msg = f"{self.worker}: start observability after the worker connected to Redis"
            raise RuntimeError(msg)
        leases = self._leases() if self._leases is not None else None
        if leases is not None:
            self.track_leases(leases)
        if not recording():
            return  # no stream-stats polling either: /metrics does not publish it
        extra = self.topology.request_streams() if self.worker == "normalization" else []
        poller = StreamStatsPoller(
            redis, watched_streams(self._groups(), extra), interval_s=self.stream_stats_interval_s
        )
        self.stream_stats = register_stream_stats(poller)
        self.health.register_task("stream_stats", poller.start())

    def begin_drain(self) -> None:
        """``/readyz`` fails from now on (first thing on SIGTERM)."""
        self.health.start_draining()

    async def stop(self) -> None:
        self.begin_drain()
        if self.stream_stats is not None:
            await self.stream_stats.stop()
