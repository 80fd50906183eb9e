"""Shard leases (ecosystem.md §5.3 point 3): every shard has exactly one owner among competing workers;
on release or expiry another worker takes it over with a higher epoch (fencing token)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime.leases import LeaseConfig, ShardLeases, current_epoch, preferred_owner
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.names import StreamNames

pytestmark = pytest.mark.integration

NAMES = StreamNames(prefix="agentbus:", shards=12)
LANE = "normalize"


class Recorder:
    """A LeaseListener that records what it is told."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int | bool]] = []

    async def shard_acquired(self, shard: int, epoch: int) -> None:
        self.events.append(("acquired", shard, epoch))

    async def shard_released(self, shard: int, *, lost: bool) -> None:
        self.events.append(("released", shard, lost))


def workers(client: aioredis.Redis, owners: list[str], *, ttl_ms: int = 10_000) -> list[ShardLeases]:
    config = LeaseConfig(ttl_ms=ttl_ms, renew_interval_ms=max(ttl_ms // 5, 10))
    return [ShardLeases(client, NAMES, lane=LANE, owner=owner, listener=Recorder(), config=config) for owner in owners]


async def settle(leases: list[ShardLeases], rounds: int = 4) -> None:
    """Tick every worker a few times, all at once, so they race for the same keys."""
    for _ in range(rounds):
        await asyncio.gather(*(worker.tick() for worker in leases))


async def holders(client: aioredis.Redis) -> dict[int, str | None]:
    values = await client.mget([NAMES.lease_key(LANE, shard) for shard in range(NAMES.shards)])
    return {shard: id_text(value) if value is not None else None for shard, value in enumerate(values)}


async def assert_exclusive(client: aioredis.Redis, leases: list[ShardLeases]) -> None:
    """Each shard is held by exactly one worker, and Redis agrees with what each worker believes."""
    owned = [set(worker.owned) for worker in leases]
    for i, mine in enumerate(owned):
        for other in owned[i + 1 :]:
            assert not mine & other
    assert set().union(*owned) == set(range(NAMES.shards))
    stored = await holders(client)
    for worker in leases:
        for shard in worker.owned:
            assert stored[shard] == worker.owner


async def epochs(client: aioredis.Redis) -> dict[int, int]:
    return {shard: await current_epoch(client, NAMES, LANE, shard) for shard in range(NAMES.shards)}


@pytest.mark.parametrize("owners", [["worker-a", "worker-b"], ["worker-a", "worker-b", "worker-c"]])
async def test_competing_workers_own_each_shard_exactly_once(aredis: aioredis.Redis, owners: list[str]) -> None:
    """With 2 or 3 workers racing, the shards are split by rendezvous hashing, each held by one worker."""
    leases = workers(aredis, owners)
    await settle(leases)
    await assert_exclusive(aredis, leases)
    for worker in leases:
        assert len(worker.owned) == NAMES.shards // len(owners)  # 12 shards split evenly
        for shard in worker.owned:
            assert preferred_owner(LANE, shard, owners, NAMES.shards) == worker.owner
    # The epoch a worker was told at its (last) acquisition is the fencing token stored in Redis.
    for worker in leases:
        recorder = worker.listener
        assert isinstance(recorder, Recorder)
        acquired = {shard: epoch for kind, shard, epoch in recorder.events if kind == "acquired"}
        stored = await epochs(aredis)
        for shard, lease in worker.owned.items():
            assert acquired[shard] == lease.epoch == stored[shard]


async def test_released_shards_go_to_the_remaining_workers(aredis: aioredis.Redis) -> None:
    """Graceful stop: the listener stops reading first, the lease is deleted, another worker takes it
    with a higher epoch."""
    a, b, c = leases = workers(aredis, ["worker-a", "worker-b", "worker-c"])
    await settle(leases)
    moved = set(c.owned)
    before = await epochs(aredis)
    recorder = c.listener
    assert isinstance(recorder, Recorder)
    seen_before_stop = len(recorder.events)
    await c.stop()
    assert not c.owned
    at_stop = recorder.events[seen_before_stop:]
    assert {(kind, shard, lost) for kind, shard, lost in at_stop} == {("released", shard, False) for shard in moved}
    await settle([a, b])
    await assert_exclusive(aredis, [a, b])
    after = await epochs(aredis)
    for shard in moved:
        assert after[shard] == before[shard] + 1


async def test_expired_lease_of_a_dead_worker_is_taken_over(aredis: aioredis.Redis) -> None:
    """A worker that stops renewing (crash) loses its shards when the TTL runs out; the survivors take
    them, and the dead worker learns it lost them when it comes back."""
    a, b, dead = leases = workers(aredis, ["worker-a", "worker-b", "worker-c"], ttl_ms=500)
    await settle(leases)
    orphaned = set(dead.owned)
    assert orphaned
    await asyncio.sleep(0.55)  # past the TTL: lease keys and membership of the dead worker expire
    await settle([a, b])
    await assert_exclusive(aredis, [a, b])
    stored = await holders(aredis)
    assert all(stored[shard] in {"worker-a", "worker-b"} for shard in orphaned)

    await dead.tick()  # it wakes up: renewals fail, it gives the shards up as lost
    recorder = dead.listener
    assert isinstance(recorder, Recorder)
    lost = {shard for kind, shard, flag in recorder.events if kind == "released" and flag is True}
    assert orphaned <= lost
    # ...and rejoining makes it win back its rendezvous shards through a graceful hand-over.
    await settle(leases)
    await assert_exclusive(aredis, leases)


async def test_joining_worker_gets_its_shards_handed_over(aredis: aioredis.Redis) -> None:
    """Scale-out: a new member wins some shards; their holder releases them gracefully first."""
    a, b = workers(aredis, ["worker-a", "worker-b"])
    await settle([a])
    assert set(a.owned) == set(range(NAMES.shards))
    await settle([a, b])
    await assert_exclusive(aredis, [a, b])
    recorder = a.listener
    assert isinstance(recorder, Recorder)
    handed = {shard for kind, shard, lost in recorder.events if kind == "released" and lost is False}
    assert handed == set(b.owned)


async def test_lease_is_not_taken_while_held(aredis: aioredis.Redis) -> None:
    """SET NX: a worker whose view says it should own a shard cannot take it from a live holder."""
    (a,) = workers(aredis, ["worker-a"])
    await a.tick()
    # Make the intruder's view stale: worker-a vanished from the membership, so it wants every shard.
    await aredis.zrem(NAMES.lease_members_key(LANE), "worker-a")
    (intruder,) = workers(aredis, ["intruder"])
    await intruder.tick()
    assert intruder.members == ["intruder"]
    assert intruder.conflicts == NAMES.shards
    assert not intruder.owned
    assert set((await holders(aredis)).values()) == {"worker-a"}
