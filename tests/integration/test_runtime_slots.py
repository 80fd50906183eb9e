"""JobSlots against a real Redis (issue 15): a slot frees the moment its job ends and the job's entry is
acked then; a failed or cancelled job leaves its entry pending (at-least-once)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime.slots import Job, JobSlots
from agentbus_redis.streams.entries import StreamEntry

pytestmark = pytest.mark.integration

STREAM = "agentbus:test:jobs"
GROUP = "tools"


async def pending_entries(client: aioredis.Redis, count: int) -> list[StreamEntry]:
    """``count`` entries read (so pending) by one consumer of GROUP."""
    await client.xgroup_create(STREAM, GROUP, id="0", mkstream=True)
    for seq in range(count):
        await client.xadd(STREAM, {"data": str(seq)})
    reply = await client.xreadgroup(GROUP, "worker-1", {STREAM: ">"}, count=count)
    return [StreamEntry(STREAM, raw_id.decode(), dict(fields)) for raw_id, fields in reply[0][1]]


async def pending_ids(client: aioredis.Redis) -> set[str]:
    rows = await client.xpending_range(STREAM, GROUP, "-", "+", 100)
    return {row["message_id"].decode() for row in rows}


def gated(gate: asyncio.Event, finished: list[str], name: str) -> Job:
    async def job() -> None:
        await gate.wait()
        finished.append(name)

    return job


async def until_pending(client: aioredis.Redis, expected: set[str]) -> None:
    """Wait for the slots' XACKs to land (a safety timeout only: the test asserts outcomes, not time)."""
    async with asyncio.timeout(10):
        while await pending_ids(client) != expected:
            await asyncio.sleep(0.01)


async def test_a_slot_is_refilled_when_its_job_ends_and_the_entry_is_acked_then(aredis: aioredis.Redis) -> None:
    long_entry, short_entry, next_entry = await pending_entries(aredis, 3)
    slots = JobSlots(aredis, group=GROUP, size=2)
    long_gate, short_gate, next_gate = asyncio.Event(), asyncio.Event(), asyncio.Event()
    finished: list[str] = []
    await slots.start(long_entry, gated(long_gate, finished, "long"))
    await slots.start(short_entry, gated(short_gate, finished, "short"))
    assert slots.holds(long_entry)
    assert slots.busy == 2
    waiting = asyncio.create_task(slots.until_free())
    await asyncio.sleep(0)
    assert not waiting.done()  # both slots busy: the consumer reads nothing more

    short_gate.set()
    await waiting  # the short job's slot is free while the long one still runs
    await until_pending(aredis, {long_entry.entry_id, next_entry.entry_id})
    assert finished == ["short"]

    await slots.start(next_entry, gated(next_gate, finished, "next"))
    next_gate.set()
    await until_pending(aredis, {long_entry.entry_id})
    assert finished == ["short", "next"]
    assert slots.stats.acked == 2

    long_gate.set()
    await slots.finish(timeout_s=None)
    assert finished == ["short", "next", "long"]
    assert await pending_ids(aredis) == set()


async def test_a_failed_job_frees_its_slot_and_leaves_its_entry_pending(aredis: aioredis.Redis) -> None:
    [entry] = await pending_entries(aredis, 1)
    slots = JobSlots(aredis, group=GROUP, size=1)

    async def fails() -> None:
        raise RuntimeError("tool worker bug")

    await slots.start(entry, fails)
    await slots.until_free()
    assert slots.busy == 0
    assert slots.stats.handler_errors == 1
    assert await pending_ids(aredis) == {entry.entry_id}  # reclaimed later, dead-lettered after max deliveries


async def test_finish_cancels_jobs_past_the_timeout_and_leaves_them_pending(aredis: aioredis.Redis) -> None:
    done_entry, stuck_entry = await pending_entries(aredis, 2)
    slots = JobSlots(aredis, group=GROUP, size=2)
    finished: list[str] = []
    done_gate, never = asyncio.Event(), asyncio.Event()
    await slots.start(done_entry, gated(done_gate, finished, "done"))
    await slots.start(stuck_entry, gated(never, finished, "stuck"))
    slots.close()
    await slots.until_free()  # closing: returns at once although both slots are busy
    assert slots.busy == 2
    done_gate.set()
    await until_pending(aredis, {stuck_entry.entry_id})
    await slots.finish(timeout_s=0)
    assert finished == ["done"]
    assert slots.busy == 0
    assert await pending_ids(aredis) == {stuck_entry.entry_id}


async def test_a_slot_count_below_one_is_refused(aredis: aioredis.Redis) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        JobSlots(aredis, group=GROUP, size=0)


async def test_entries_of_two_streams_with_the_same_id_run_in_two_slots(aredis: aioredis.Redis) -> None:
    """One worker's slots serve every shard's stream, and two shards hand out the same id to entries written
    in the same millisecond (issue 25): a job is known by its entry's stream and id together."""
    streams = [f"{STREAM}:{{s00}}", f"{STREAM}:{{s01}}"]
    entries = []
    for stream in streams:
        await aredis.xgroup_create(stream, GROUP, id="0", mkstream=True)
        await aredis.xadd(stream, {"data": "job"}, id="1700000000000-0")
        reply = await aredis.xreadgroup(GROUP, "worker-1", {stream: ">"}, count=1)
        [(raw_id, fields)] = reply[0][1]
        entries.append(StreamEntry(stream, raw_id.decode(), dict(fields)))
    first, second = entries
    assert first.entry_id == second.entry_id
    slots = JobSlots(aredis, group=GROUP, size=2)
    gate = asyncio.Event()
    finished: list[str] = []
    await slots.start(first, gated(gate, finished, "first"))
    assert slots.holds(first)
    assert not slots.holds(second)  # the same id on the other shard is another job
    await slots.start(second, gated(gate, finished, "second"))
    assert slots.busy == 2
    gate.set()
    await slots.finish(timeout_s=None)
    assert sorted(finished) == ["first", "second"]
    for stream in streams:
        assert await aredis.xpending_range(stream, GROUP, "-", "+", 10) == []  # both acked
