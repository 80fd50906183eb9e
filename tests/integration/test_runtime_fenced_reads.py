"""Fenced reads (``services/runtime/fenced_reads.py``): an ordered lane takes entries only while its lease
epoch holds, and waits for them in the same round trip (ecosystem.md §5.3 point 3)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from services.runtime import fenced_reads
from services.runtime.batch import Fence
from services.runtime.key_calls import Fenced

pytestmark = pytest.mark.integration

STREAM = "fenced:{s00}:ingress"
GROUP = "lane"
FENCE = Fence("fenced:lease_epoch:{s00}", "7")


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
