"""A background task that does one Redis pass every ``interval_s`` until stopped (off the hot path)."""

from __future__ import annotations

import asyncio
import contextlib

import structlog
from redis.exceptions import RedisError

log = structlog.get_logger(__name__)


class PeriodicTask:
    """Runs :meth:`tick` every ``interval_s``; a Redis error is counted and logged as ``failure_event``, and
    the next pass tries again. :meth:`stop` wakes the loop at once."""

    task_name = "periodic"
    failure_event = "periodic_task_failed"

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.errors = 0
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def tick(self) -> None:
        raise NotImplementedError

    async def run(self) -> None:
        while not self._stop.is_set():
            try:
                await self.tick()
            except (RedisError, OSError) as exc:
                self.errors += 1
                log.warning(self.failure_event, error=repr(exc))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.interval_s)

    def start(self) -> asyncio.Task[None]:
        if self._task is None or self._task.done():
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name=self.task_name)
        return self._task

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task
