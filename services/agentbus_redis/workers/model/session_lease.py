"""The per-session call lease: at most one model call in flight per session, across every model worker.

A lease is ``SET key token NX PX ttl``; its holder renews it while it streams and deletes it when the call
ends (both only while it still holds it: compare-and-act scripts). A worker that dies stops renewing, and
the lease expires ``ttl`` later, when another worker that took over the request may call.

The token is the fencing token of the call's writes too (``publisher.py``): every write of the call runs
only while the lease still holds it, so a worker that lost its lease without noticing yet (paused, starved
past the ``ttl``) cannot write into a session another worker now calls for; it learns so as
:class:`SessionLeaseLost`, as it does when a renewal fails.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from agentbus_redis.runtime.leases import RELEASE_IF_HELD, RENEW_IF_HELD


class SessionLeaseLost(Exception):  # a verdict, not a malfunction
    """The session's call lease is no longer this call's: the call stops, publishing nothing more, and its
    notice stays pending (the worker that holds the lease now, or the one that reclaims the notice, serves
    the request)."""

    def __init__(self, key: str, token: str) -> None:
        super().__init__(f"session call lease {key} is no longer held by {token}")
        self.key = key
        self.token = token


class SessionLease:
    """One worker's hold on one session's call lease."""

    def __init__(self, redis: aioredis.Redis, key: str, *, owner: str, ttl_ms: int) -> None:
        self.redis = redis
        self.key = key
        self.owner = owner
        self.ttl_ms = ttl_ms

    async def try_acquire(self) -> bool:
        return bool(await self.redis.set(self.key, self.owner, nx=True, px=self.ttl_ms))

    async def renew(self) -> bool:
        """Extend the lease; False when it was lost (expired and maybe taken by another worker)."""
        return bool(await self.redis.eval(RENEW_IF_HELD, 1, self.key, self.owner, self.ttl_ms))

    async def release(self) -> None:
        await self.redis.eval(RELEASE_IF_HELD, 1, self.key, self.owner)
