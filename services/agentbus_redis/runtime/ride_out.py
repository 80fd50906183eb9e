"""Ride out a Redis that is briefly unavailable: a restart, a cluster master failing over.

A client of the bus (the SDK, the CLI, the Agent tool's launch) retries an idempotent Redis call on the
errors of a Redis that is down *for now* (:data:`RIDE_OUT_ERRORS`), with redis-py's own
:class:`~redis.asyncio.retry.Retry` and jittered exponential backoff, for at most ``bound_s`` seconds from
the first failure; after that it raises one :class:`RedisUnavailable` naming what it was doing. Only calls
that may run twice go through here: a publish (its idempotency key makes a second XADD a duplicate that
ingestion drops), a read from a stream position the caller keeps (``XREAD`` from its last id neither
repeats nor skips an entry).

redis-py's per-connection retry (3 quick attempts) covers a dropped connection; it does not cover a Redis
that takes seconds to come back, nor the cluster errors of a failover (``CLUSTERDOWN``, ``READONLY`` from a
demoted master) — those are what this bound is for.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from redis.asyncio.retry import Retry
from redis.backoff import ExponentialWithJitterBackoff

from agentbus_redis.errors import AgentbusError
from agentbus_redis.runtime.lazy_log import get_logger
from agentbus_redis.runtime.redis_client import TRANSIENT_ERRORS

T = TypeVar("T")

log = get_logger(__name__)

DEFAULT_RIDE_OUT_S = 60.0
"""How long a client waits for Redis to come back before :class:`RedisUnavailable` (``AGENTBUS_REDIS_RIDE_OUT_S``)."""
BACKOFF_BASE_S = 0.05
BACKOFF_CAP_S = 1.0
"""Retries start at 50 ms and back off to one a second: a restarted Redis is used within a second of its return."""

RIDE_OUT_ERRORS: tuple[type[Exception], ...] = TRANSIENT_ERRORS
"""The errors of a Redis that is down for now (``READONLY``, a master demoted by a failover, and ``UNBLOCKED``, a
blocking read it ended, among them)."""


class RedisUnavailable(AgentbusError):
    """Redis stayed unavailable for longer than the client's bound; ``what`` says what was attempted. A
    publish may be retried later with the same idempotency key (it is applied once)."""

    def __init__(self, what: str, bound_s: float, error: BaseException) -> None:
        super().__init__(f"{what}: Redis unavailable for {bound_s:g}s ({type(error).__name__}: {error})")
        self.what = what
        self.bound_s = bound_s


async def ride_out(
    call: Callable[[], Awaitable[T]],
    *,
    bound_s: float,
    what: str,
    errors: tuple[type[Exception], ...] = RIDE_OUT_ERRORS,
) -> T:
    """``await call()``, again after each error of ``errors`` until it succeeds, for at most ``bound_s`` seconds
    after the first failure; then :class:`RedisUnavailable` (from the last error). ``call`` must be safe to
    run twice (see the module docstring)."""
    started: float | None = None

    async def failed(error: Exception, failures: int) -> None:
        nonlocal started
        now = time.monotonic()
        if started is None:
            started = now
        if now - started >= bound_s:
            raise RedisUnavailable(what, bound_s, error) from error
        if failures == 1:
            log.info("redis_unavailable_retrying", what=what, error=repr(error), bound_s=bound_s)

    retry = Retry(ExponentialWithJitterBackoff(cap=BACKOFF_CAP_S, base=BACKOFF_BASE_S), -1, errors)  # type: ignore[arg-type]
    return await retry.call_with_retry(call, failed, with_failure_count=True)
