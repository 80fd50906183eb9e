"""The per-session call lease: at most one model call in flight per session, across every model worker.

A lease is ``SET key owner NX PX ttl``; its holder renews it while it streams and deletes it when the call
ends (both only while it still holds it: compare-and-act scripts). A worker that dies stops renewing, and
the lease expires ``ttl`` later, when another worker that took over the request may call.
"""

from __future__ import annotations

import redis.asyncio as aioredis

from services.runtime.leases import RELEASE_IF_HELD, RENEW_IF_HELD


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
