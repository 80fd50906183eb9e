"""A connection another task closes while this one writes on it fails with ``ConnectionError`` (which every
caller rides out), not redis-py 8.1's ``AttributeError: 'NoneType' object has no attribute 'writelines'``: a
cluster client refreshing its slot map after a failover closes the failed node's connections under the tasks
using them, and a client gave up on a publish that way (issue 25; upstream redis/redis-py#4288)."""

from __future__ import annotations

import asyncio

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from agentbus_redis.runtime.redis_client import ClosableConnection, connect, worker_redis

pytestmark = pytest.mark.integration


async def test_a_write_on_a_connection_closed_meanwhile_is_a_connection_error(redis_url: str) -> None:
    client = connect(redis_url, socket_timeout=5)
    try:
        pool = client.connection_pool
        assert pool.connection_class is ClosableConnection
        connection = await pool.get_connection()
        # With a socket timeout the write runs in a task of its own (asyncio.wait_for): it starts one loop pass
        # later, after another task closed the connection (a slot map refresh, say).
        write = asyncio.ensure_future(connection.send_packed_command(connection.pack_command("PING")))
        await asyncio.sleep(0)
        await connection.disconnect(nowait=True)
        with pytest.raises(RedisConnectionError, match="closed while writing"):
            await write
        await pool.release(connection)
        assert await client.ping()  # the pool reconnects as for any dropped connection
    finally:
        await client.aclose()


def test_worker_and_cluster_clients_use_the_closable_connection() -> None:
    plain = worker_redis("redis://127.0.0.1:1/0")
    assert plain.connection_pool.connection_class is ClosableConnection
    cluster = connect("redis+cluster://127.0.0.1:1?seeds=127.0.0.1:2")
    manager = cluster.nodes_manager  # type: ignore[attr-defined]
    assert manager.connection_kwargs["connection_class"] is ClosableConnection
    assert {node.connection_class for node in manager.startup_nodes.values()} == {ClosableConnection}
