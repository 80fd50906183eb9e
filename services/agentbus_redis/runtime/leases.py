"""Shard ownership for ordered lanes (ecosystem.md §5.3 point 3).

Each shard of a lane has a lease ``SET lease:<lane>:{s07} <owner> NX PX ttl``; its owner is the only
reader of the shard's stream, so a session's events are handled in stream order however many worker
instances run. Every acquisition increments the shard's epoch (``INCR``, same slot, same Lua call);
writes carry it as a fencing token so a downstream writer can reject a stale owner.

Which worker owns which shard is decided by rendezvous (highest-random-weight) hashing with bounded
loads over the live members of the lane: each worker heartbeats into a sorted set scored by expiry, and
every worker computes the same assignment from that set (strongest (shard, member) weights first, no
member above ceil(shards / members)), so the shards are spread evenly — plain rendezvous hashing gives
all 4 shards of a 2-worker lane to one worker 1 time in 8. When a member joins, the others hand over the
shards it now wins (gracefully: stop reading, then delete the lease); when one dies, its membership and
leases expire and its shards are reassigned among the rest. Renewal is a compare-and-pexpire, release a
compare-and-del, both in Lua. A worker that cannot renew gives a shard up on its own once the lease may
have expired (self-fencing).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import redis.asyncio as aioredis
import structlog

from agentbus_redis.runtime.batch import raise_if_cancelling
from agentbus_redis.runtime.redis_client import TRANSIENT_ERRORS
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.names import StreamNames

log = structlog.get_logger(__name__)

_TRANSIENT = TRANSIENT_ERRORS

_ACQUIRE = """
local current = redis.call('GET', KEYS[1])
if current == false then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
elseif current == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
else
  return 0
end
return redis.call('INCR', KEYS[2])
"""
"""Take a free lease (or re-take our own after a restart) and return the new epoch; 0 when taken."""

RENEW_IF_HELD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

RELEASE_IF_HELD = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_MEMBERS = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if tonumber(ARGV[2]) > 0 then
  redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[1])
else
  redis.call('ZREM', KEYS[1], ARGV[1])
end
return redis.call('ZRANGE', KEYS[1], 0, -1)
"""
"""Heartbeat ``ARGV[1]`` for ``ARGV[2]`` ms (0 = leave), drop expired members, return the live ones.
Expiry uses the server clock so members on different hosts agree."""


def rendezvous_score(lane: str, shard: int, owner: str) -> int:
    """The weight of ``owner`` for ``shard``: the highest weight among live members owns the shard."""
    digest = hashlib.blake2b(f"{lane}\x00{shard}\x00{owner}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def assign_shards(lane: str, shards: int, members: Sequence[str]) -> list[str | None]:
    """The owner of each of ``shards`` shards among ``members``: rendezvous hashing with bounded loads.

    (shard, member) pairs are taken strongest weight first; a member stops taking shards at
    ceil(shards / members). Deterministic for a given member set, so all workers agree; every shard gets
    an owner when there is at least one member.
    """
    unique = sorted(set(members))
    owners: list[str | None] = [None] * shards
    if not unique:
        return owners
    capacity = -(-shards // len(unique))
    load = dict.fromkeys(unique, 0)
    weighted = sorted(
        ((rendezvous_score(lane, shard, member), member, shard) for shard in range(shards) for member in unique),
        reverse=True,
    )
    for _, member, shard in weighted:
        if owners[shard] is None and load[member] < capacity:
            owners[shard] = member
            load[member] += 1
    return owners


def preferred_owner(lane: str, shard: int, members: Sequence[str], shards: int) -> str | None:
    """The member that should own ``shard`` of a ``shards``-shard lane (None when there are no members)."""
    return assign_shards(lane, shards, members)[shard]


class LeaseListener(Protocol):
    """Told when this worker gains or gives up a shard (start / stop the shard's consumer)."""

    async def shard_acquired(self, shard: int, epoch: int) -> None: ...

    async def shard_released(self, shard: int, *, lost: bool) -> None:
        """``lost``: the lease is already gone (expired or taken); otherwise it is released after this."""
        ...


@dataclass(frozen=True, slots=True)
class LeaseConfig:
    ttl_ms: int = 10_000
    renew_interval_ms: int | None = None
    """Defaults to a third of ``ttl_ms``."""

    @property
    def interval_s(self) -> float:
        interval = self.renew_interval_ms if self.renew_interval_ms is not None else self.ttl_ms // 3
        return interval / 1000


@dataclass(frozen=True, slots=True)
class Lease:
    shard: int
    epoch: int
    valid_until_monotonic: float
    """Conservative end of the lease: measured from before the renewing command was sent."""


class ShardLeases:
    """Acquire, renew and release the shard leases of one worker (``owner``) in one ``lane``."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: StreamNames,
        *,
        lane: str,
        owner: str,
        listener: LeaseListener | None = None,
        config: LeaseConfig | None = None,
    ) -> None:
        self.redis = redis
        self.names = names
        self.lane = lane
        self.owner = owner
        self.listener = listener
        self.config = config if config is not None else LeaseConfig()
        self.members: list[str] = []
        self.conflicts = 0
        """Acquisitions that found the lease held by another owner."""
        self._owned: dict[int, Lease] = {}
        self._assigned_for: tuple[str, ...] = ()
        self._assignment: list[str | None] = []
        self._stop = asyncio.Event()
        self._lock = asyncio.Lock()
        self._acquire = redis.register_script(_ACQUIRE)
        self._renew = redis.register_script(RENEW_IF_HELD)
        self._release = redis.register_script(RELEASE_IF_HELD)
        self._heartbeat = redis.register_script(_MEMBERS)
        self._log = log.bind(lane=lane, owner=owner)

    @property
    def owned(self) -> dict[int, Lease]:
        """The shards this worker holds now (a copy)."""
        return dict(self._owned)

    def holds(self, shard: int) -> bool:
        """Whether this worker's lease on ``shard`` is surely still valid by the local clock (a process
        that was paused past the lease's end answers False until it renewed or gave the shard up)."""
        lease = self._owned.get(shard)
        return lease is not None and time.monotonic() < lease.valid_until_monotonic

    def rendezvous_order(self) -> list[int]:
        """Every shard, the ones this worker is most likely to win first."""
        shards = range(self.names.shards)
        return sorted(shards, key=lambda shard: rendezvous_score(self.lane, shard, self.owner), reverse=True)

    def target_shards(self, members: list[str]) -> list[int]:
        """The shards this worker should own given the live ``members``, in rendezvous order."""
        candidates = tuple(sorted({*members, self.owner}))
        if candidates != self._assigned_for:
            # Recomputed only when the membership changes (S × M hashes).
            self._assignment = assign_shards(self.lane, self.names.shards, candidates)
            self._assigned_for = candidates
        return [shard for shard in self.rendezvous_order() if self._assignment[shard] == self.owner]

    async def tick(self) -> None:
        """One round: heartbeat, renew held leases, hand over shards others now win, take free ones."""
        async with self._lock:
            if not self._stop.is_set():
                await self._tick()

    async def _tick(self) -> None:
        started = time.monotonic()
        ttl = self.config.ttl_ms
        raw_members = await self._heartbeat(keys=[self.names.lease_members_key(self.lane)], args=[self.owner, ttl])
        self.members = [id_text(member) for member in raw_members]
        await self._renew_owned(started)
        target = self.target_shards(self.members)
        for shard in [shard for shard in self._owned if shard not in target]:
            await self._hand_over(shard)
        for shard in target:
            if shard not in self._owned:
                await self._try_acquire(shard, started)

    async def run(self) -> None:
        """Tick every renew interval until ``stop``, for as long as the worker lives: a tick that fails (Redis
        down, a refused command, a listener that raised) never ends the loop; the leases still surely valid
        are kept, the others given up (self-fencing), and the next tick renews or takes them again."""
        while not self._stop.is_set():
            raise_if_cancelling()
            try:
                await self.tick()
            except _TRANSIENT as exc:
                self._log.warning("lease_redis_unavailable", error=repr(exc))
                await self._after_failed_tick()
            except Exception:
                self._log.exception("lease_tick_failed")
                await self._after_failed_tick()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.config.interval_s)

    async def _after_failed_tick(self) -> None:
        try:
            async with self._lock:
                await self._drop_expired()
        except Exception:  # a listener that cannot stop a shard's consumer: the next tick tries again
            self._log.exception("lease_drop_expired_failed")

    async def stop(self) -> None:
        """Stop ticking, hand every shard back (listener first, then compare-and-del) and leave the lane.

        A tick in progress (in another task) finishes first: the lock keeps the two from interleaving.
        """
        self._stop.set()
        async with self._lock:
            for shard in list(self._owned):
                await self._hand_over(shard)
            with contextlib.suppress(*_TRANSIENT):
                await self._heartbeat(keys=[self.names.lease_members_key(self.lane)], args=[self.owner, 0])

    async def _renew_owned(self, started: float) -> None:
        if not self._owned:
            return
        shards = list(self._owned)
        # Concurrent calls, not a pipeline: a Cluster pipeline refuses scripts, and each lease may live on
        # another node.
        results: list[Any] = await asyncio.gather(
            *(
                self._renew(keys=[self.names.lease_key(self.lane, shard)], args=[self.owner, self.config.ttl_ms])
                for shard in shards
            )
        )
        valid_until = started + self.config.ttl_ms / 1000
        for shard, renewed in zip(shards, results, strict=True):
            lease = self._owned.get(shard)
            if lease is None:
                continue
            if int(renewed) == 1:
                self._owned[shard] = Lease(shard, lease.epoch, valid_until)
            else:
                self._log.warning("lease_lost", shard=shard, epoch=lease.epoch)
                await self._forget(shard, lost=True)

    async def _try_acquire(self, shard: int, started: float) -> None:
        keys = [self.names.lease_key(self.lane, shard), self.names.lease_epoch_key(self.lane, shard)]
        epoch = int(await self._acquire(keys=keys, args=[self.owner, self.config.ttl_ms]))
        if epoch == 0:
            self.conflicts += 1
            return
        self._owned[shard] = Lease(shard, epoch, started + self.config.ttl_ms / 1000)
        self._log.info("lease_acquired", shard=shard, epoch=epoch)
        if self.listener is not None:
            try:
                await self.listener.shard_acquired(shard, epoch)
            except BaseException:
                await self._hand_over(shard)
                raise

    async def _hand_over(self, shard: int) -> None:
        """Give ``shard`` up gracefully: the listener stops reading first, then the lease is deleted."""
        lease = self._owned.pop(shard, None)
        if lease is None:
            return
        if self.listener is not None:
            await self.listener.shard_released(shard, lost=False)
        with contextlib.suppress(*_TRANSIENT):
            # If Redis is unreachable the lease simply expires.
            await self._release(keys=[self.names.lease_key(self.lane, shard)], args=[self.owner])
        self._log.info("lease_released", shard=shard, epoch=lease.epoch)

    async def _forget(self, shard: int, *, lost: bool) -> None:
        self._owned.pop(shard, None)
        if self.listener is not None:
            await self.listener.shard_released(shard, lost=lost)

    async def _drop_expired(self) -> None:
        """Self-fencing: without a successful renewal a lease may have passed to another worker."""
        # Give up a shard when it might expire before the next tick, not after.
        deadline = time.monotonic() + self.config.interval_s
        for shard, lease in list(self._owned.items()):
            if lease.valid_until_monotonic <= deadline:
                self._log.warning("lease_expired_unrenewed", shard=shard, epoch=lease.epoch)
                await self._forget(shard, lost=True)


async def current_epoch(redis: aioredis.Redis, names: StreamNames, lane: str, shard: int) -> int:
    """The latest epoch handed out for ``shard`` (0 if never acquired): writes with a lower one are stale."""
    raw = await redis.get(names.lease_epoch_key(lane, shard))
    return int(raw) if raw is not None else 0
