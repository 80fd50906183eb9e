"""Fenced reads: a shard lane takes entries out of its stream only while its lease epoch holds.

Fencing the writes alone (``key_calls.py``) is not enough for an ordered lane. A blocking
``XREADGROUP … >`` sent while the lease was valid can be served after it passed to another worker (the
sender was CPU-starved or paused between its lease check and the read, or the lease lapsed while the read
was blocked): Redis then hands the next entry of the shard to the stale owner, whose write is refused, and
the entry stays in its pending list while the new owner reads on past it — a session's later events are
applied before an earlier one (seen as a request built from a history missing a message).

So an ordered lane never takes entries with a plain ``XREADGROUP``: it waits for new entries with an
``XREAD BLOCK`` (which takes nothing) and then takes them with a script that first compares the shard's
epoch key with its token — the same check, in the same atomic step, as its writes. Takeover claims go
through the same fence.

The wait and the take travel in one packet (``connection_calls.py``): Redis runs a connection's commands in
order, so the script queued behind a blocked ``XREAD`` runs only once that returns (with news, or empty after
its timeout), and checks the epoch at that moment: one round trip per read, as with a blocking
``XREADGROUP``. A lane sends them behind its previous batch's settle script, in the same packet
(``consumer.py``): one round trip per batch in all.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.connection import AbstractConnection

from agentbus_redis.runtime import connection_calls
from agentbus_redis.runtime.batch import Fence
from agentbus_redis.runtime.key_calls import FENCE_CHECK_LUA, Arg, Fenced, ServerScript
from agentbus_redis.streams.entries import RawEntry, id_text

_READ = ServerScript(
    FENCE_CHECK_LUA
    + """
if ARGV[4] == 'claim' then
  return redis.call('XAUTOCLAIM', KEYS[2], ARGV[2], ARGV[3], ARGV[7], ARGV[6], 'COUNT', ARGV[5])
end
local read = redis.call('XREADGROUP', 'GROUP', ARGV[2], ARGV[3], 'COUNT', ARGV[5], 'STREAMS', KEYS[2], '>')
if read then
  return {read[1][2]}
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
if last[1] then
  return {{}, last[1][1]}
end
return {{}, '0-0'}
"""
)
"""KEYS: the epoch key, the stream. ARGV: token, group, consumer, ``read`` | ``claim``, count, claim start,
claim min idle ms.
``read`` answers ``{entries}``, or ``{{}, id of the stream's last entry}`` when there is nothing new (every
entry up to that id was delivered to the group: wait for anything after it)."""


@dataclass(frozen=True, slots=True)
class FencedRead:
    rows: list[Any]
    """The entries taken, as the script answers them: ``[id, [name, value, …]]`` (``entries.decode_rows``)."""
    wait_after: str | None
    """When nothing was new: the id to wait for newer entries after (``XREAD BLOCK``)."""

    @property
    def entries(self) -> list[RawEntry]:
        """The entries taken, as redis-py's ``XREADGROUP`` returns them: ``(id, {name: value})``."""
        return _raw_entries(self.rows)


@dataclass(frozen=True, slots=True)
class FencedClaim:
    next_start: str
    entries: list[RawEntry]
    deleted: list[str]


@dataclass(frozen=True, slots=True)
class ReadRequest:
    """``XREADGROUP … COUNT count STREAMS stream >`` if ``fence`` still holds; with ``wait_after``, first wait up
    to ``block_ms`` for an entry after that id (in the same round trip)."""

    fence: Fence
    stream: str
    group: str
    consumer: str
    count: int
    wait_after: str | None = None
    block_ms: int = 0

    @property
    def keys(self) -> list[str]:
        return [self.fence.key, self.stream]

    @property
    def args(self) -> list[Arg]:
        return [self.fence.token, self.group, self.consumer, "read", self.count, "0-0", 0]

    def commands(self) -> list[list[Arg]]:
        """What to send: the wait (if any), then the take."""
        take = _READ.command(self.keys, self.args)
        if self.wait_after is None:
            return [take]
        return [["XREAD", "COUNT", 1, "BLOCK", self.block_ms, "STREAMS", self.stream, self.wait_after], take]


def _raw_entries(rows: list[Any]) -> list[RawEntry]:
    """Script replies carry an entry's fields as a flat ``[name, value, …]`` list (``[]`` once deleted)."""
    return [(row[0], dict(zip(row[1][::2], row[1][1::2], strict=True)) if row[1] else None) for row in rows]


async def read_new(
    redis: aioredis.Redis,
    fence: Fence,
    stream: str,
    group: str,
    consumer: str,
    count: int,
    *,
    wait_after: str | None = None,
    block_ms: int = 0,
) -> FencedRead:
    """Run a :class:`ReadRequest` on a connection of ``redis``'s pool; raises :class:`Fenced`."""
    request = ReadRequest(fence, stream, group, consumer, count, wait_after, block_ms)
    async with redis.client() as client:
        return await read_replies(client, await connection_calls.send(client, request.commands()), request)


async def read_replies(redis: aioredis.Redis, connection: AbstractConnection, request: ReadRequest) -> FencedRead:
    """The outcome of ``request``, whose commands were sent on ``connection`` (every reply is read before an
    error is raised, so the connection stays usable)."""
    woke = await connection_calls.next_reply(connection) if request.wait_after is not None else None
    reply = await connection_calls.next_reply(connection)
    if isinstance(woke, Exception):
        raise woke  # e.g. NOPERM: never go on reading without the wait (that would spin)
    if isinstance(reply, Exception):
        reply = await _READ.retry_fenced(redis, request.keys, request.args, reply)
    if len(reply) == 1:
        return FencedRead(reply[0], None)
    return FencedRead([], id_text(reply[1]))


async def claim(
    redis: Any, fence: Fence, stream: str, group: str, consumer: str, *, count: int, min_idle_ms: int, start: str
) -> FencedClaim:
    """``XAUTOCLAIM stream group consumer min_idle_ms start COUNT count`` if ``fence`` still holds."""
    args: list[Arg] = [fence.token, group, consumer, "claim", count, start, min_idle_ms]
    next_start, rows, deleted = await _READ.run_fenced(redis, [fence.key, stream], args)
    return FencedClaim(id_text(next_start), _raw_entries(rows), [id_text(entry_id) for entry_id in deleted])


__all__ = ["Fenced", "FencedClaim", "FencedRead", "ReadRequest", "claim", "read_new", "read_replies"]
