"""PeriodicTask (issue 25): a loop that renews something that expires must run as long as its worker does. A
failed pass — Redis down (redis-py's ConnectionError), or anything else (a refused command, a bug) — is
counted, logged and retried after a backoff; only stop() ends the loop."""

from __future__ import annotations

import asyncio

from redis.exceptions import ConnectionError as RedisConnectionError

from agentbus_redis.runtime.periodic import PeriodicTask


class Flaky(PeriodicTask):
    """Fails its first passes with what it is given, then succeeds."""

    def __init__(self, failures: list[Exception]) -> None:
        super().__init__(interval_s=0.01)
        self.failures = failures
        self.ticks = 0
        self.succeeded = asyncio.Event()

    async def tick(self) -> None:
        self.ticks += 1
        if self.failures:
            raise self.failures.pop(0)
        if self.passes >= 3:
            self.succeeded.set()


async def test_a_failed_pass_never_ends_the_loop() -> None:
    task = Flaky([RedisConnectionError("Redis restarting"), ValueError("a bug"), OSError("reset")])
    running = task.start()
    async with asyncio.timeout(30):  # a safety bound only
        await task.succeeded.wait()
    assert not running.done()
    assert task.errors == 3
    await task.stop()
    assert running.done()
    assert running.exception() is None


async def test_stop_before_the_first_pass_ends_the_loop_at_once() -> None:
    task = Flaky([])
    running = task.start(first_after_s=3600)
    await task.stop()
    assert running.done()
    assert task.ticks == 0
