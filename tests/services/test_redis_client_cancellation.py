"""A cancelled Redis command is cancelled, for every client the bus makes (runtime/redis_client.py).

On Python 3.11, redis-py's default 5 s socket timeout sends each command inside ``asyncio.wait_for``, which
swallows a cancel that lands after the send finished but before the awaiting task resumed (CPython gh-86296):
the command then runs on as if never cancelled. Measured before the fix with this file's trials: 78 of 320
cancels lost for the SDK's client (``redis_client.connect``, redis-py's defaults then), 0 for the workers'.
A loop that ends only by being cancelled (the SDK's readers under ``asyncio.timeout``, a test's watcher, a
benchmark's observer) then ran forever and whoever awaited its end hung: ``bench/tool_round.py`` hung at its
teardown every run, and a fresh clone once ran into the TTL loop test's timeout with its lease watcher still
counting renewals after the loop of turns (session 19).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime import redis_client
from agentbus_redis.sdk import AgentbusClient

LOOP_TURNS = range(8)
"""Event-loop turns between starting a command and cancelling it: they cover the send, its completion and the
wake-up of the task that awaits it (the window where 3.11's ``wait_for`` loses a cancel)."""
TRIALS_PER_TURN = 40

CLIENTS: dict[str, Callable[[str], aioredis.Redis]] = {
    "connect (SDK, console, agentbus up)": redis_client.connect,
    "worker_redis": redis_client.worker_redis,
    "AgentbusClient.connect": lambda url: AgentbusClient.connect(url).redis,
}


async def _cancelled_at(redis: aioredis.Redis, loop_turns: int) -> bool:
    """Start a PING, cancel it after ``loop_turns`` turns of the loop: whether the task ended cancelled (or had
    already finished before the cancel, which is no loss)."""
    command = asyncio.create_task(redis.ping())
    for _ in range(loop_turns):
        await asyncio.sleep(0)
    finished_before = command.done()
    command.cancel()
    await asyncio.wait({command}, timeout=30)
    assert command.done(), "a cancelled PING did not end within 30 s"
    return finished_before or command.cancelled()


@pytest.mark.parametrize("make", CLIENTS.values(), ids=CLIENTS.keys())
async def test_every_cancel_of_a_command_is_kept(redis_url: str, make: Callable[[str], aioredis.Redis]) -> None:
    redis = make(redis_url)
    try:
        lost = [turns for turns in LOOP_TURNS for _ in range(TRIALS_PER_TURN) if not await _cancelled_at(redis, turns)]
    finally:
        await redis.aclose()
    assert lost == [], f"{len(lost)} of {len(LOOP_TURNS) * TRIALS_PER_TURN} cancels lost (at loop turns {set(lost)})"


async def test_a_loop_that_ends_only_by_cancel_ends_at_every_cancel(redis_url: str) -> None:
    """The shape that hung: a watcher that reads until it is cancelled, cancelled at whatever point it is in."""
    redis = redis_client.connect(redis_url)
    await redis.xadd("cancel-test:stream", {"n": "0"})

    async def watch() -> None:
        while True:
            await redis.xrange("cancel-test:stream", count=1)
            await redis.xread({"cancel-test:stream": "$"}, block=20, count=10)

    try:
        for turns in range(200):
            watcher = asyncio.create_task(watch())
            for _ in range(turns % 13):
                await asyncio.sleep(0)
            watcher.cancel()
            done, _ = await asyncio.wait({watcher}, timeout=30)
            assert done, f"the watcher cancelled after {turns % 13} loop turns was still running 30 s later"
            assert watcher.cancelled()
    finally:
        await redis.aclose()
