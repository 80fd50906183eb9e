"""Issue 20: the cluster client on a real 3-master Redis Cluster — ``redis+cluster://`` URLs, a lane's
connection pinned to its slot's node, scripts per node, and a slot moved under a pinned connection."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio.cluster import RedisCluster

from agentbus_redis.local.redis_cluster import LocalRedisCluster
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.runtime.redis_client import SlotMoved, is_cluster_url, lane_client, node_of, worker_redis
from agentbus_redis.runtime.stream_admin import init_streams, stream_report
from agentbus_redis.streams.names import StreamNames, key_slot
from agentbus_redis.streams.topology import Topology


def test_a_cluster_is_named_by_its_url_scheme() -> None:
    assert is_cluster_url("redis+cluster://10.0.0.1:6379")
    assert is_cluster_url("rediss+cluster://user:pw@10.0.0.1:6379?seeds=10.0.0.2:6379")
    assert not is_cluster_url("redis://127.0.0.1:6379/0")
    assert not is_cluster_url("rediss://127.0.0.1:6379/0")


async def test_the_shards_of_a_default_install_spread_over_the_three_masters(redis_cluster: LocalRedisCluster) -> None:
    names = StreamNames(shards=8)
    redis = worker_redis(redis_cluster.url)
    try:
        assert isinstance(redis, RedisCluster)
        nodes = [await node_of(redis, names.shard_stream(shard, "log")) for shard in range(8)]
    finally:
        await redis.aclose()
    assert sorted(nodes.count(node) for node in set(nodes)) == [2, 3, 3]


async def test_a_lane_connection_is_pinned_to_the_node_of_its_slot(redis_cluster: LocalRedisCluster) -> None:
    names = StreamNames(shards=8)
    redis = worker_redis(redis_cluster.url)
    try:
        for shard in range(8):
            stream = names.shard_stream(shard, "log")
            lane = lane_client(redis, stream)
            try:
                # A fenced batch script of the shard's keys (NOSCRIPT on each node the first time).
                calls = KeyCalls()
                calls.add_xadd(stream, {"data": b"x"})
                calls.add("SET", names.lease_epoch_key("ingestion", shard), "7")
                await calls.write(lane)
                await calls.write_fenced(lane, key=names.lease_epoch_key("ingestion", shard), token="7")
                assert await lane.xlen(stream) == 2
                assert lane.connection is not None
                owner = redis_cluster.master_of_slot(key_slot(stream[stream.index("{") + 1 : stream.index("}")]))
                assert lane.connection.port == owner.port
            finally:
                await lane.aclose()
    finally:
        await redis.aclose()


async def test_a_pinned_connection_follows_its_slot_when_it_moves(redis_cluster: LocalRedisCluster) -> None:
    """MOVED on the pinned connection: nothing ran, the connection is dropped (SlotMoved) and the next
    command reaches the slot's new node; what was written before the move moved with the slot."""
    names = StreamNames(shards=8)
    stream = names.shard_stream(3, "moving")
    slot = key_slot(stream[stream.index("{") + 1 : stream.index("}")])
    redis = worker_redis(redis_cluster.url)
    lane = lane_client(redis, stream)
    try:
        await lane.xadd(stream, {"n": 1})
        source = redis_cluster.master_of_slot(slot)
        target = next(node for node in redis_cluster.masters_now() if node.port != source.port)
        await asyncio.to_thread(redis_cluster.move_slot, slot, target)
        with pytest.raises(SlotMoved):
            await lane.execute_command("XADD", stream, "*", "n", 2)
        assert await lane.xadd(stream, {"n": 3})
        assert lane.connection is not None
        assert lane.connection.port == target.port
        assert [fields[b"n"] for _, fields in await lane.xrange(stream)] == [b"1", b"3"]
        await asyncio.to_thread(redis_cluster.move_slot, slot, source)  # leave the session's cluster as it was
    finally:
        await lane.aclose()
        await redis.aclose()


async def test_streams_info_names_the_node_of_each_shard(redis_cluster: LocalRedisCluster) -> None:
    """``agentbus streams info`` on a cluster: every row says which node serves its stream's slot."""
    topology = Topology(StreamNames(shards=4))
    redis = worker_redis(redis_cluster.url)
    try:
        await init_streams(redis, topology)
        rows = await stream_report(redis, topology)
    finally:
        await redis.aclose()
    assert rows
    for row in rows:
        stream = row["stream"]
        owner = redis_cluster.master_of_slot(key_slot(stream[stream.index("{") + 1 : stream.index("}")]))
        assert row["node"] == owner.address
