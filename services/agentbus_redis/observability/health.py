"""Liveness and readiness of a worker (ecosystem.md §4.3), as ASGI handlers for ``AsgiFastStream``.

- ``/healthz`` (liveness): every registered consume loop completed a step within ``progress_timeout_s``
  and no registered background task has died. It does no I/O and does not fail on a Redis outage (the
  consume loop counts a retry while Redis is down as progress), so an outage does not restart every pod
  at once; it catches the "zombie pod" whose loop hangs (faststream discussion #2272).
- ``/readyz`` (readiness): the worker's runtime started (it waits for Redis to answer first), Redis answers
  ``PING``, every consumer group the worker reads exists, and the worker is not draining (shutdown
  started). Kubernetes stops routing to, and compose marks unhealthy, a worker that is not ready.

Both answer ``200`` or ``503`` with a small JSON body naming each check.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis
from faststream.asgi import AsgiResponse, get
from faststream.asgi.handlers import GetHandler
from faststream.asgi.types import Scope
from redis.exceptions import RedisError

from agentbus_redis.observability.consumer_metrics import ConsumerProvider
from agentbus_redis.streams.entries import id_text

ProgressSource = Callable[[], float]
"""Returns the ``time.monotonic()`` of the loop's last completed step."""
GroupSource = Callable[[], Sequence[tuple[str, str]]]
"""Returns the (stream, group) pairs the worker reads."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class HealthReport:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def to_json(self) -> bytes:
        return orjson.dumps(
            {
                "status": "ok" if self.ok else "fail",
                "checks": {check.name: {"ok": check.ok, "detail": check.detail} for check in self.checks},
            }
        )

    def response(self) -> AsgiResponse:
        return AsgiResponse(self.to_json(), 200 if self.ok else 503, {"content-type": "application/json"})


RedisSource = Callable[[], "aioredis.Redis | None"]
"""Returns the worker's client (None before startup): read per request because it is built at startup."""


TaskSource = Callable[[], Mapping[str, "asyncio.Task[Any] | None"]]
"""Returns the background tasks that must run as long as the worker does, by name (None: not started yet)."""

StartupSource = Callable[[], "asyncio.Task[Any] | None"]
"""Returns the task that starts the worker's runtime once Redis answers (None: nothing to wait for)."""


def _no_redis() -> aioredis.Redis | None:
    return None


def _no_startup() -> asyncio.Task[Any] | None:
    return None


def _not_draining() -> bool:
    return False


@dataclass(slots=True)
class Health:
    """What ``/healthz`` and ``/readyz`` check for one worker process."""

    redis: RedisSource = _no_redis
    groups: GroupSource = field(default=lambda: ())
    draining_source: Callable[[], bool] = _not_draining
    """An outside draining flag (e.g. the process's shutdown state), OR-ed with :meth:`start_draining`."""
    startup: StartupSource = _no_startup
    """Not ready while this task runs (waiting for Redis); not alive if it failed."""
    notes: Callable[[], Iterable[tuple[str, bool, str]]] = field(default=lambda: ())
    """Checks the runtime adds to ``/readyz`` as (name, ok, detail): e.g. a tool worker's sandbox state."""
    progress_timeout_s: float = 60.0
    ping_timeout_s: float = 2.0
    clock: Callable[[], float] = time.monotonic
    _loops: dict[str, ProgressSource] = field(default_factory=dict)
    _consumers: dict[str, ConsumerProvider] = field(default_factory=dict)
    _tasks: dict[str, asyncio.Task[Any]] = field(default_factory=dict)
    _task_sources: list[TaskSource] = field(default_factory=list)
    _draining: bool = False

    def register_loop(self, name: str, last_progress: ProgressSource) -> None:
        """A loop that stamps its progress (e.g. ``lambda: consumer.stats.last_progress_monotonic``)."""
        self._loops[name] = last_progress

    def register_consumers(self, name: str, provider: ConsumerProvider) -> None:
        """Every consumer ``provider()`` returns is a loop (lane consumers come and go with their shards)."""
        self._consumers[name] = provider

    def register_task(self, name: str, task: asyncio.Task[Any]) -> None:
        """A background task (lease renewal, stream stats, …) that must not end while the worker runs."""
        self._tasks[name] = task

    def register_task_source(self, source: TaskSource) -> None:
        """Background tasks read per check (a runtime's renew loops: they exist once it started)."""
        self._task_sources.append(source)

    @property
    def draining(self) -> bool:
        return self._draining or self.draining_source()

    def start_draining(self) -> None:
        """Shutdown began: ``/readyz`` fails from now on, ``/healthz`` tolerates finished tasks."""
        self._draining = True

    def liveness(self) -> HealthReport:
        now = self.clock()
        checks: list[Check] = []
        starting = self.startup()
        if starting is not None and starting.done() and not starting.cancelled():
            error = starting.exception()
            checks.append(Check("startup", error is None, _failed(error) if error is not None else "started"))
        for name, source in self._loops.items():
            checks.append(self._progress_check(name, now - source()))
        for name, provider in self._consumers.items():
            for consumer in list(provider()):
                check_name = f"{name}:{consumer.stream}"
                if consumer.failure is not None:
                    checks.append(Check(check_name, False, _failed(consumer.failure)))
                else:
                    checks.append(self._progress_check(check_name, now - consumer.last_progress_monotonic))
        for name, task in self._tasks.items():
            checks.append(self._task_check(name, task))
        for task_source in self._task_sources:
            for name, sourced in task_source().items():
                if sourced is not None:
                    checks.append(self._task_check(name, sourced))
        return HealthReport(tuple(checks))

    def _progress_check(self, name: str, age_s: float) -> Check:
        ok = age_s <= self.progress_timeout_s
        return Check(name, ok, f"last progress {age_s:.1f}s ago (limit {self.progress_timeout_s:g}s)")

    def _task_check(self, name: str, task: asyncio.Task[Any]) -> Check:
        if not task.done():
            return Check(f"task:{name}", True, "running")
        if task.cancelled():
            return Check(f"task:{name}", self.draining, "cancelled")
        error = task.exception()
        if error is not None:
            return Check(f"task:{name}", False, _failed(error))
        return Check(f"task:{name}", self.draining, "finished")

    async def readiness(self) -> HealthReport:
        draining = self.draining
        checks = [Check("draining", not draining, "shutting down" if draining else "")]
        checks.extend(Check(name, ok, detail) for name, ok, detail in self.notes())
        starting = self.startup()
        if starting is not None and not starting.done():
            checks.append(Check("started", False, "waiting for Redis to answer"))
            return HealthReport(tuple(checks))
        if starting is not None and not starting.cancelled() and (error := starting.exception()) is not None:
            checks.append(Check("started", False, _failed(error)))  # e.g. a tool worker whose sandbox does not work
            return HealthReport(tuple(checks))
        redis = self.redis()
        if redis is None:
            checks.append(Check("redis", False, "not connected yet"))
            return HealthReport(tuple(checks))
        try:
            await asyncio.wait_for(redis.ping(), self.ping_timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            checks.append(Check("redis", False, repr(exc)[:300]))
            return HealthReport(tuple(checks))
        checks.append(Check("redis", True))
        checks.extend(await self._group_checks(redis))
        return HealthReport(tuple(checks))

    async def _group_checks(self, redis: aioredis.Redis) -> list[Check]:
        pairs = list(self.groups())
        if not pairs:
            return []
        pipe = redis.pipeline(transaction=False)
        for stream, _ in pairs:
            pipe.xinfo_groups(stream)
        try:
            replies: list[Any] = await asyncio.wait_for(pipe.execute(raise_on_error=False), self.ping_timeout_s)
        except (RedisError, OSError, TimeoutError) as exc:
            return [Check("groups", False, repr(exc)[:300])]
        missing = [
            f"{stream}/{group}" for (stream, group), reply in zip(pairs, replies, strict=True) if not _has(reply, group)
        ]
        detail = f"missing: {', '.join(missing[:8])}" if missing else f"{len(pairs)} present"
        return [Check("groups", not missing, detail)]


def _failed(error: BaseException) -> str:
    # Not repr(): redis-py's errors repr as e.g. "server:ResponseError", without the server's message.
    return f"failed: {type(error).__name__}: {error}"[:300]


def _has(groups_reply: Any, group: str) -> bool:
    if isinstance(groups_reply, Exception) or not groups_reply:
        return False
    return any(id_text(row.get("name", row.get(b"name", b""))) == group for row in groups_reply)


def healthz_handler(health: Health) -> GetHandler:
    """``GET /healthz`` for ``AsgiFastStream(asgi_routes=[("/healthz", healthz_handler(health)), …])``."""

    @get(include_in_schema=False)
    async def healthz(scope: Scope) -> AsgiResponse:
        return health.liveness().response()

    return healthz


def readyz_handler(health: Health) -> GetHandler:
    """``GET /readyz``: Redis PING, consumer groups present, not draining."""

    @get(include_in_schema=False)
    async def readyz(scope: Scope) -> AsgiResponse:
        return (await health.readiness()).response()

    return readyz


def lane_groups(streams: Iterable[str], group: str) -> list[tuple[str, str]]:
    """The (stream, group) pairs of one group over several (shard) streams."""
    return [(stream, group) for stream in streams]
