"""Issue 25, "clients ride out failovers": ``converse()`` on a Redis Cluster (3 masters, a replica each) while the
master of some sessions' shard is SIGKILLed, its replica promoted and the old master restarted as a replica —
against real worker processes (ingestion, normalization), the model's side played through the SDK.

Every conversation keeps going through the failover and every turn ends at end_turn with its text exactly
once: no ``ConnectionError`` (nor ``CLUSTERDOWN``/``READONLY``) reaches the caller, no delta repeats or goes
missing, and the prompts published while the slot had no master land once.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentbus_redis.local.redis_cluster import ClusterNodeProcess, LocalRedisCluster
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import ConversationEvent, TextDelta, TurnEnd
from agentbus_redis.streams.names import key_slot
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import TEST_SHARDS, WorkerCluster
from tests.integration.model_side import ModelSide, Reply, reply_events, request_id_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSIONS = 8


def paced(text: str, *, pause_s: float) -> Reply:
    async def reply(bus: AgentbusClient, session: str) -> None:
        request_id = request_id_of(session)
        for event in reply_events([TextBlock(text=text)]):
            await bus.send_stream_event(session, request_id, event)
            await asyncio.sleep(pause_s)

    return reply


def reply_text(session: str, turn: int) -> str:
    return f"Reply {turn} of {session}: " + " ".join(f"word{n}" for n in range(20)) + "."


def slot_of_shard(topology: Topology, shard: int) -> int:
    stream = topology.log(shard)
    return key_slot(stream[stream.index("{") + 1 : stream.index("}")])


async def converse_until(bus: AgentbusClient, session: str, done: asyncio.Event) -> list[list[ConversationEvent]]:
    """Turn after turn until ``done`` is set, then one more."""
    turns: list[list[ConversationEvent]] = []
    last = False
    while not last:
        last = done.is_set()
        turn = len(turns)
        model = await ModelSide.start(bus, session, [paced(reply_text(session, turn), pause_s=0.03)])
        turns.append([event async for event in bus.converse(session, f"prompt {turn}", timeout_s=120)])
        await model
    return turns


@pytest.mark.timeout(400)
async def test_conversations_complete_across_a_master_failover(
    failover_cluster: LocalRedisCluster, tmp_path: Path
) -> None:
    workers = WorkerCluster(redis_url=failover_cluster.url, root=tmp_path)
    workers.start("ingestion")
    workers.start("normalization")
    killed: list[ClusterNodeProcess] = []
    try:
        await asyncio.to_thread(workers.wait_ready)
        topology = Topology(workers.names)
        first = failover_cluster.nodes[0]  # FastStream's pub/sub connection uses it: another master is killed
        victim = next(
            master
            for shard in range(TEST_SHARDS)
            if (master := failover_cluster.master_of_slot(slot_of_shard(topology, shard))).port != first.port
        )
        victim_shards = {
            shard
            for shard in range(TEST_SHARDS)
            if failover_cluster.master_of_slot(slot_of_shard(topology, shard)).port == victim.port
        }
        sessions = [f"ride-failover-{n}" for n in range(SESSIONS * 4)]
        sessions = [s for s in sessions if workers.names.shard_of(s) in victim_shards][: SESSIONS // 2] + [
            s for s in sessions if workers.names.shard_of(s) not in victim_shards
        ][: SESSIONS // 2]
        done = asyncio.Event()
        bus = workers.client()
        bus.ride_out_s = 120.0
        async with bus:
            talks = [asyncio.ensure_future(converse_until(bus, session, done)) for session in sessions]
            await asyncio.sleep(1.0)
            victim.stop(kill=True)
            killed.append(victim)
            await asyncio.to_thread(failover_cluster.wait_failed_over, victim)
            await asyncio.to_thread(failover_cluster.restart, victim)
            done.set()
            results = await asyncio.gather(*talks, return_exceptions=True)
    finally:
        workers.stop()
    failures = [result for result in results if isinstance(result, BaseException)]
    assert not failures, f"{len(failures)} of {len(sessions)} conversations failed: {failures[:3]!r}"
    for session, turns in zip(sessions, results, strict=True):
        assert isinstance(turns, list)
        assert len(turns) >= 2
        for turn, events in enumerate(turns):
            ends = [event for event in events if isinstance(event, TurnEnd)]
            assert len(ends) == 1, (session, turn, events[-3:])
            assert ends[0].stop_reason == "end_turn", (session, turn, ends[0])
            text = "".join(event.text for event in events if isinstance(event, TextDelta))
            assert text == reply_text(session, turn), (session, turn)
