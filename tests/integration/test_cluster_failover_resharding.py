"""Issue 20: a Redis Cluster changing under live traffic — a master killed (its replica takes over) and a
shard's slot resharded to another master — loses nothing that was acknowledged and reorders nothing.

Producers publish numbered prompts per session and retry each until it is acknowledged (the same
idempotency key, so a retry is applied once); with ``AGENTBUS_REDIS_WAIT_REPLICAS=1`` an acknowledgement
means a replica has the entry. Afterwards each session's log holds every acknowledged prompt exactly once,
in order, and the normalizer's latest request covers the whole log.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from agentbus_redis.bus.events import UserPrompt
from agentbus_redis.local.redis_cluster import ClusterNodeProcess, LocalRedisCluster
from agentbus_redis.runtime import redis_client
from agentbus_redis.runtime.ride_out import RedisUnavailable
from agentbus_redis.sdk.client import AgentbusClient, NotReplicated
from agentbus_redis.streams.names import key_slot
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import TEST_SHARDS, WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSIONS_PER_SHARD = 2


def sessions(names: Topology) -> list[str]:
    """``SESSIONS_PER_SHARD`` session ids on every shard."""
    found: dict[int, list[str]] = {shard: [] for shard in range(TEST_SHARDS)}
    index = 0
    while any(len(ids) < SESSIONS_PER_SHARD for ids in found.values()):
        session = f"cluster-change-{index}"
        ids = found[names.names.shard_of(session)]
        if len(ids) < SESSIONS_PER_SHARD:
            ids.append(session)
        index += 1
    return [session for ids in found.values() for session in ids]


def slot_of_shard(topology: Topology, shard: int) -> int:
    stream = topology.log(shard)
    return key_slot(stream[stream.index("{") + 1 : stream.index("}")])


class Producers:
    """One producer per session: numbered prompts, each retried until acknowledged."""

    def __init__(self, bus: AgentbusClient, session_ids: list[str]) -> None:
        self.bus = bus
        self.acked = dict.fromkeys(session_ids, 0)
        self.retries = 0
        self.stop = asyncio.Event()
        self._tasks = [asyncio.create_task(self._produce(session)) for session in session_ids]

    async def _produce(self, session: str) -> None:
        while not self.stop.is_set():
            number = self.acked[session]
            prompt = UserPrompt(content=f"prompt {number}")
            while True:
                try:
                    await self.bus.publish(session, prompt, idempotency_key=f"{session}:{number}")
                    break
                except (*redis_client.TRANSIENT_ERRORS, NotReplicated, RedisUnavailable):
                    # The client's own ride-out is off here (ride_out_s=0): every interruption the kill
                    # causes reaches this producer, which counts it and retries with the same key.
                    self.retries += 1
                    await asyncio.sleep(0.1)
            self.acked[session] = number + 1
            await asyncio.sleep(0.02)

    async def wait_for(self, total: int) -> None:
        async def enough() -> bool:
            return sum(self.acked.values()) >= total

        await eventually(enough, timeout_s=120)

    async def finish(self) -> None:
        self.stop.set()
        await asyncio.gather(*self._tasks)


async def assert_every_acknowledged_prompt_once_in_order(bus: AgentbusClient, producers: Producers) -> None:
    for session, count in producers.acked.items():

        async def logged(session: str = session, count: int = count) -> bool:
            return len(await bus.history(session)) >= count

        with contextlib.suppress(TimeoutError):
            await eventually(logged, timeout_s=60)
        prompts = [entry.message.message.content for entry in await bus.history(session)]  # type: ignore[union-attr]
        assert prompts == [f"prompt {number}" for number in range(count)], session

        async def request_covers_the_log(session: str = session, count: int = count) -> bool:
            request = await bus.latest_request(session)
            return request is not None and request.seq == count

        await eventually(request_covers_the_log, timeout_s=60)


async def run_with_change(
    nodes: LocalRedisCluster, workers: WorkerCluster, change: Callable[[Topology], Awaitable[None]]
) -> Producers:
    """Start the workers, let traffic flow, apply ``change`` under it, let traffic flow on; check the logs."""
    workers.start_all(instances=1)
    topology = Topology(workers.names)
    bus = AgentbusClient(redis_client.connect(nodes.url), topology, wait_replicas=nodes.replicas, ride_out_s=0.0)
    async with bus:
        producers = Producers(bus, sessions(topology))
        try:
            await producers.wait_for(len(producers.acked) * 3)
            await change(topology)
            before = sum(producers.acked.values())
            await producers.wait_for(before + len(producers.acked) * 3)
        finally:
            await producers.finish()
        await assert_every_acknowledged_prompt_once_in_order(bus, producers)
    return producers


@pytest.mark.timeout(300)
async def test_a_killed_master_fails_over_and_nothing_acknowledged_is_lost(
    failover_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    """SIGKILL the master of a shard (not the first node: FastStream's pub/sub connection uses that one) under
    traffic: its replica is promoted, the lanes pinned to it reconnect to the new master, the producers'
    retries go through (once the old master is back as a replica, WAIT 1 can be met again), and every prompt
    acknowledged with WAIT 1 is in its session's log exactly once, in order."""
    workers = WorkerCluster(
        redis_url=failover_cluster.url, root=tmp_path, extra_env={"AGENTBUS_REDIS_WAIT_REPLICAS": "1"}
    )
    killed: list[ClusterNodeProcess] = []

    async def kill_a_master(topology: Topology) -> None:
        first = failover_cluster.nodes[0]
        for shard in range(TEST_SHARDS):
            master = failover_cluster.master_of_slot(slot_of_shard(topology, shard))
            if master.port != first.port:
                master.stop(kill=True)
                killed.append(master)
                break
        await asyncio.to_thread(failover_cluster.wait_failed_over, killed[0])
        # The promoted replica has no replica of its own: WAIT 1 cannot be met on its shards (the producers
        # keep retrying) until the old master comes back, as a replica of its successor.
        await asyncio.to_thread(failover_cluster.restart, killed[0])

    try:
        producers = await run_with_change(failover_cluster, workers, kill_a_master)
    finally:
        workers.stop()
    assert killed, "no shard had a master other than the first node"
    assert producers.retries > 0, "the kill did not interrupt the producers: nothing was tested"


@pytest.mark.timeout(300)
async def test_a_shard_resharded_under_traffic_loses_and_reorders_nothing(
    failover_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    """Move the slot of shard 0 (its streams, leases, session keys) to another master key by key
    (SETSLOT MIGRATING/IMPORTING, MIGRATE, SETSLOT NODE) while traffic flows: lanes pinned to the old node
    meet ASK/TRYAGAIN/MOVED, reconnect to the new owner and re-read their pending entries; the fenced settle
    script makes a retried batch land once."""
    workers = WorkerCluster(redis_url=failover_cluster.url, root=tmp_path)
    moved: list[int] = []

    async def reshard(topology: Topology) -> None:
        slot = slot_of_shard(topology, 0)
        source = failover_cluster.master_of_slot(slot)
        target = next(node for node in failover_cluster.masters_now() if node.port != source.port)
        moved.append(await asyncio.to_thread(failover_cluster.move_slot, slot, target, keys_per_step=2, pause_s=0.05))
        assert failover_cluster.master_of_slot(slot).port == target.port

    try:
        await run_with_change(failover_cluster, workers, reshard)
    finally:
        workers.stop()
    assert moved[0] > 0
