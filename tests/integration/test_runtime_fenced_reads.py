"""Fenced reads (``runtime/fenced_reads.py``): an ordered lane takes entries only while its lease
epoch holds, and waits for them in the same round trip (ecosystem.md §5.3 point 3)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from agentbus_redis.runtime import fenced_reads
from agentbus_redis.runtime.batch import Fence
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig, Output
from agentbus_redis.runtime.key_calls import Fenced
from agentbus_redis.streams.entries import StreamEntry

pytestmark = pytest.mark.integration

STREAM = "fenced:{s00}:ingress"
GROUP = "lane"
FENCE = Fence("fenced:lease_epoch:{s00}", "7")
OUT = "fenced:{s00}:out"


@pytest.fixture
async def stream(aredis: aioredis.Redis) -> str:
    await aredis.set(FENCE.key, FENCE.token)
    await aredis.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    return STREAM


async def read(redis: aioredis.Redis, *, wait_after: str | None, block_ms: int = 50) -> fenced_reads.FencedRead:
    return await fenced_reads.read_new(
        redis, FENCE, STREAM, GROUP, "owner", 10, wait_after=wait_after, block_ms=block_ms
    )


async def test_a_wait_that_times_out_takes_nothing_and_names_the_last_id(aredis: aioredis.Redis, stream: str) -> None:
    first = (await aredis.xadd(stream, {"n": 1})).decode()
    taken = await read(aredis, wait_after=None)
    assert [entry_id.decode() for entry_id, _ in taken.entries] == [first]
    idle = await read(aredis, wait_after=first)
    assert idle.entries == []
    assert idle.wait_after == first


async def test_the_wait_wakes_on_a_new_entry_and_the_take_follows_it(aredis: aioredis.Redis, stream: str) -> None:
    waiting = asyncio.create_task(read(aredis, wait_after="0-0", block_ms=5000))
    await asyncio.sleep(0.1)
    new = (await aredis.xadd(stream, {"n": 2})).decode()
    taken = await asyncio.wait_for(waiting, 2)
    assert [(entry_id.decode(), fields) for entry_id, fields in taken.entries] == [(new, {b"n": b"2"})]


async def test_a_take_after_a_flushed_script_cache_loads_the_script(aredis: aioredis.Redis, stream: str) -> None:
    """After a Redis restart the script is unknown: the pipelined EVALSHA answers NOSCRIPT, the read re-runs it."""
    await aredis.xadd(stream, {"n": 3})
    await aredis.script_flush()
    taken = await read(aredis, wait_after="0-0")
    assert len(taken.entries) == 1


async def test_the_lease_moving_on_during_the_wait_takes_nothing(aredis: aioredis.Redis, stream: str) -> None:
    """The epoch is checked when the wait ends, not when it was sent: a new owner's epoch fences the take."""
    waiting = asyncio.create_task(read(aredis, wait_after="0-0", block_ms=5000))
    await asyncio.sleep(0.1)
    await aredis.set(FENCE.key, "8")
    await aredis.xadd(stream, {"n": 4})
    with pytest.raises(Fenced):
        await asyncio.wait_for(waiting, 2)
    assert int((await aredis.xpending(stream, GROUP))["pending"]) == 0


async def test_a_failed_wait_is_raised_not_skipped(aredis: aioredis.Redis, stream: str) -> None:
    """An XREAD the server refuses (here: a wrong id) must not let the take run without waiting (a spin)."""
    with pytest.raises(ResponseError):
        await read(aredis, wait_after="not-an-id")


# --- a lane's read sent behind its settle script (consumer.py ``_settle_then_read``) -------------------------


LANE_CLIENT = "fenced-lane-under-test"
SAFETY_TIMEOUT_S = 60
WAIT_MS = 600_000
"""A lane's wait that outlasts every safety timeout of these tests: it ends only when an entry comes or the test
ends it (:func:`stop_waiting_lane`)."""


def lane(client: aioredis.Redis, seen: list[str], *, block_ms: int) -> BatchConsumer:
    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        seen.extend(entry.fields["n"].decode() for entry in batch)
        return BatchOutcome(outputs=[Output(OUT, {"n": entry.fields["n"]}) for entry in batch])

    config = ConsumerConfig(count=10, block_ms=block_ms, ordered=True, fence=FENCE, backoff_initial_s=0.01)
    return BatchConsumer(client, stream=STREAM, group=GROUP, consumer="owner", handler=handle, config=config)


async def blocked_xreads(aredis: aioredis.Redis) -> int:
    """How many of the lane's connections wait in an ``XREAD BLOCK`` now."""
    clients = await aredis.client_list()
    return sum(1 for c in clients if c["name"] == LANE_CLIENT and c["cmd"] == "xread" and "b" in c["flags"])


async def test_a_batch_is_settled_while_the_read_sent_behind_it_waits(
    aredis: aioredis.Redis, redis_url: str, stream: str
) -> None:
    """One round trip per batch: the settle script and the next wait travel together, and the script's reply
    (outputs written, entry acked) is read as soon as it ran, not when the wait behind it ends.

    The wait blocks for longer than the test may last (``WAIT_MS``), so no clock decides the outcome: the ack is
    awaited (counted once the lane has read the script's reply, which comes a little after another connection can
    already see the outputs, all the later on a busy machine), and when it is counted the read sent behind the
    script is still blocked. Were the reply read only when the wait ended, the ack would not come in time."""
    seen: list[str] = []
    async with aioredis.Redis.from_url(redis_url, client_name=LANE_CLIENT) as client:
        consumer = lane(client, seen, block_ms=WAIT_MS)

        async def acked() -> int:
            return consumer.stats.acked

        consumer.start()
        await wait_until_true(lambda: blocked_xreads(aredis), expected=1)
        await aredis.xadd(stream, {"n": "1"})
        await wait_until_true(acked, expected=1)
        assert await aredis.xlen(OUT) == 1
        assert int((await aredis.xpending(stream, GROUP))["pending"]) == 0
        assert await blocked_xreads(aredis) == 1  # the next read already waits in Redis
        await aredis.xadd(stream, {"n": "2"})
        await wait_until_true(acked, expected=2)
        assert await aredis.xlen(OUT) == 2
        await stop_waiting_lane(consumer, aredis)
    assert seen == ["1", "2"]


async def test_a_settle_script_unknown_after_a_flush_is_reloaded_and_nothing_is_read_twice(
    aredis: aioredis.Redis, redis_url: str, stream: str
) -> None:
    """After a Redis restart the scripts are gone: the settle EVALSHA answers NOSCRIPT with a read already queued
    behind it. The read is dropped with the connection, the batch is written by EVAL, and whatever the read took
    is re-read from the lane's pending list: every entry handled once, in order, all acked."""
    seen: list[str] = []
    async with aioredis.Redis.from_url(redis_url) as client:
        consumer = lane(client, seen, block_ms=50)
        consumer.start()
        await aredis.xadd(stream, {"n": "1"})
        await wait_until_true(lambda: aredis.xlen(OUT), expected=1)
        for n in range(2, 6):
            await aredis.script_flush()
            await aredis.xadd(stream, {"n": str(n)})
            await wait_until_true(lambda: aredis.xlen(OUT), expected=n)
        await consumer.stop()
    assert seen == ["1", "2", "3", "4", "5"]
    assert int((await aredis.xpending(stream, GROUP))["pending"]) == 0
    assert consumer.stats.handler_errors == 0


async def wait_until_true(value: Callable[[], Awaitable[int]], *, expected: int) -> None:
    """Poll ``value`` until it equals ``expected`` (a safety timeout only, generous: the machine may be busy)."""
    async with asyncio.timeout(SAFETY_TIMEOUT_S):
        while await value() != expected:
            await asyncio.sleep(0.01)


async def stop_waiting_lane(consumer: BatchConsumer, aredis: aioredis.Redis) -> None:
    """Stop a lane whose read waits ``WAIT_MS``: a read already sent is finished before the loop stops, so its
    wait is ended as its timeout would end it (``CLIENT UNBLOCK``: the XREAD answers nothing, the take behind it
    finds nothing), again for as long as the loop runs (it may have sent another before it saw the stop)."""
    async with asyncio.timeout(SAFETY_TIMEOUT_S):
        stopping = asyncio.create_task(consumer.stop())
        while not stopping.done():
            for connection in await aredis.client_list():
                if connection["name"] == LANE_CLIENT and "b" in connection["flags"]:
                    await aredis.client_unblock(int(connection["id"]))
            await asyncio.wait([stopping], timeout=0.05)
        await stopping
