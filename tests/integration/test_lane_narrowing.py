"""Issue 15, head-of-line blame: a failing batch of an ordered lane is narrowed to the entries that fail.

Only the culprit is dead-lettered, with the handler's exception as its reason; the rest of the batch is
handled once, in order; a healthy entry that sat in a batch with a failing (or process-killing) one is
never dead-lettered by the crash-loop guard. BatchConsumer against a real Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import replace

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime.consumer import BatchConsumer, BatchHandler, BatchOutcome, ConsumerConfig, Output
from agentbus_redis.streams.deadletter import REASON_MAX_DELIVERIES, list_dead_letters
from agentbus_redis.streams.entries import StreamEntry

pytestmark = pytest.mark.integration

STREAM = "agentbus:test:lane"
OUT = "agentbus:test:lane-out"
GROUP = "lane-group"
LANE = ConsumerConfig(block_ms=20, ordered=True, max_deliveries=5, backoff_initial_s=0.005, backoff_max_s=0.02)


class Refused(RuntimeError):
    """The test handler's typed failure."""


async def wait_until(predicate: Callable[[], bool], *, timeout_s: float = 20.0) -> None:
    """Poll ``predicate`` (a safety timeout only; the tests assert on outcomes, not on time)."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(0.005)


async def fill(client: aioredis.Redis, values: list[str]) -> list[str]:
    pipe = client.pipeline(transaction=False)
    for value in values:
        pipe.xadd(STREAM, {"data": value})
    return [raw.decode() for raw in await pipe.execute()]


def refusing(handled: list[str], attempts: list[list[str]], bad: str = "bad") -> BatchHandler:
    """Handle a batch as a whole (one output per entry) unless it holds a ``bad`` entry: then raise."""

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        values = [entry.fields["data"].decode() for entry in batch]
        attempts.append(values)
        for value in values:
            if value.startswith(bad):
                raise Refused(f"{value} is refused")
        handled.extend(values)
        return BatchOutcome(outputs=[Output(OUT, {"data": value}) for value in values])

    return handle


async def pending(client: aioredis.Redis) -> int:
    return int((await client.xpending(STREAM, GROUP))["pending"])


@pytest.mark.parametrize("transactional", [False, True], ids=["per-entry", "transactional"])
async def test_five_failing_entries_then_a_healthy_one(aredis: aioredis.Redis, transactional: bool) -> None:
    """The issue's case: five entries that always fail, then a healthy one, in one batch of one shard. Each
    bad entry is dead-lettered once with the handler's exception; the healthy one is handled exactly once."""
    ids = await fill(aredis, ["ok-0", *(f"bad-{i}" for i in range(5)), "ok-1", "ok-2"])
    handled: list[str] = []
    attempts: list[list[str]] = []
    config = replace(LANE, transactional=transactional)
    consumer = BatchConsumer(
        aredis, stream=STREAM, group=GROUP, consumer="lane", handler=refusing(handled, attempts), config=config
    )
    consumer.start()
    await wait_until(lambda: consumer.stats.acked == len(ids))
    await consumer.stop()

    assert handled == ["ok-0", "ok-1", "ok-2"]
    assert [fields[b"data"] for _, fields in await aredis.xrange(OUT)] == [b"ok-0", b"ok-1", b"ok-2"]
    letters = await list_dead_letters(aredis, STREAM + ":dlq")
    assert [letter.entry_id for letter in letters] == ids[1:6]
    for letter, index in zip(letters, range(5), strict=True):
        assert letter.reason == "handler_failed"
        assert letter.detail.startswith(f"Refused: bad-{index} is refused")
        assert "failed 5 times" in letter.detail
    # While a culprit fails it is retried alone; the healthy entries behind it are re-read a bounded number of
    # times (not once per retry round of every culprit before them).
    assert sum("ok-1" in attempt for attempt in attempts) <= 3
    assert await aredis.exists(STREAM + ":failures") == 0
    assert await pending(aredis) == 0


async def test_healthy_entries_behind_a_process_killer_are_not_a_crash_loop(aredis: aioredis.Redis) -> None:
    """failure_counts.py's crash-loop guard: an entry whose handling takes the process down (simulated: the
    consumer is cancelled with the batch in hand, which is what a SIGKILL leaves behind) is dead-lettered after
    4 × max_deliveries deliveries; the healthy entries that were in its batch are handled, never dead-lettered."""
    ids = await fill(aredis, ["ok-0", "killer", "ok-1", "ok-2"])
    handled: list[str] = []
    in_hand = asyncio.Event()

    async def crashing(batch: list[StreamEntry]) -> BatchOutcome:
        values = [entry.fields["data"].decode() for entry in batch]
        if "killer" in values:
            in_hand.set()
            await asyncio.Event().wait()  # "dies" here: cancelled below, nothing recorded, nothing acked
        handled.extend(values)
        return BatchOutcome()

    config = ConsumerConfig(block_ms=20, ordered=True, max_deliveries=2, backoff_initial_s=0.005, backoff_max_s=0.02)
    restarts = 0
    while True:
        in_hand.clear()
        consumer = BatchConsumer(aredis, stream=STREAM, group=GROUP, consumer="lane", handler=crashing, config=config)
        consumer.start()
        settled = asyncio.create_task(wait_until(lambda c=consumer: c.stats.dead_lettered == 1))  # type: ignore[misc]
        crashed = asyncio.create_task(in_hand.wait())
        await asyncio.wait([settled, crashed], return_when=asyncio.FIRST_COMPLETED)
        for task in (settled, crashed):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if consumer.stats.dead_lettered == 1:
            await wait_until(lambda: len(handled) == 3)
            await consumer.stop()
            break
        await consumer.stop(timeout_s=0)  # the "SIGKILL": the batch in hand stays pending
        restarts += 1
        assert restarts < 50

    assert handled == ["ok-0", "ok-1", "ok-2"]
    (letter,) = await list_dead_letters(aredis, STREAM + ":dlq")
    assert (letter.entry_id, letter.reason) == (ids[1], REASON_MAX_DELIVERIES)
    assert "crash loop" in letter.detail
    assert await pending(aredis) == 0
