"""Commands written at once to a single-connection client's socket, their replies read one at a time.

redis-py's ``Pipeline`` checks a connection out of the pool for every ``execute`` and answers only once every
reply is in. A shard lane needs neither: it owns a connection (``Redis.client()``), and it wants the reply to
its batch's settle script as soon as Redis has run it while the read queued behind it may block for up to
``block_ms`` (``consumer.py``). Redis runs a connection's commands in order and writes each reply when the
command ran, so the first reply arrives while a later ``XREAD BLOCK`` still waits.

The caller reads every reply it sent before sending again; after an exception it must drop the connection
(:func:`drop`), since replies may still be on their way.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import hiredis
import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from agentbus_redis.runtime.key_calls import Arg

Command = Sequence[Arg]


async def send(redis: aioredis.Redis, commands: Sequence[Command]) -> AbstractConnection:
    """Write ``commands`` in one packet on ``redis``'s own connection (it must be a ``Redis.client()``)."""
    if not redis.single_connection_client:
        msg = "connection_calls needs a single-connection client (Redis.client())"
        raise ValueError(msg)
    connection = redis.connection
    if connection is None:  # the first use: check one out (initialize() takes a lock, ~15 µs, so only once)
        await redis.initialize()
        connection = redis.connection
        assert connection is not None
    # Packed by hiredis (C): redis-py's asyncio connections pack in Python, ~6 µs a command here
    # (redis/redis-py#4176). hiredis's stub types the argument as a 1-tuple; any length is accepted.
    packed = [hiredis.pack_command(tuple(command)) for command in commands]  # type: ignore[arg-type]
    await connection.send_packed_command(b"".join(packed))
    return connection


async def next_reply(connection: AbstractConnection) -> Any:
    """The next reply on ``connection``; an error reply is returned (a ``ResponseError``), not raised."""
    try:
        return await connection.read_response()
    except ResponseError as error:
        return error


async def drop(redis: aioredis.Redis) -> None:
    """Close ``redis``'s connection, with whatever replies are still due on it (the next command reconnects)."""
    if redis.connection is not None:
        await redis.connection.disconnect()
