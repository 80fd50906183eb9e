"""A background task that does one Redis pass every ``interval_s`` until stopped (off the hot path).

Many of these renew something that expires (a tool worker's catalog entry) or must keep happening for as
long as the worker lives (stream trimming, gauges): a pass that fails never ends the loop. Only
:meth:`PeriodicTask.stop` (or a cancellation) does.
"""

from __future__ import annotations

import asyncio
import contextlib

from agentbus_redis.runtime.batch import raise_if_cancelling
from agentbus_redis.runtime.lazy_log import get_logger
from agentbus_redis.runtime.redis_client import TRANSIENT_ERRORS

log = get_logger(__name__)

BACKOFF_INITIAL_S = 0.1


class PeriodicTask:
    """Runs :meth:`tick` every ``interval_s`` in a task of its own (:meth:`start`) until :meth:`stop`.

    A failed pass is counted in :attr:`errors` and logged as ``failure_event`` (Redis down or restarting: a
    warning; anything else, e.g. a refused command: with its traceback) and tried again after a backoff
    that starts at :data:`BACKOFF_INITIAL_S` and doubles up to ``interval_s``: a task renewing something
    with a TTL renews it as soon as Redis is back, without hammering a Redis that stays away. A pass that
    succeeds resets the backoff. :meth:`stop` wakes the loop at once and waits for it to end.
    """

    task_name = "periodic"
    failure_event = "periodic_task_failed"
    retry_max_s: float | None = None
    """The longest wait between failed passes (None: ``interval_s``): shorter where what the task renews must be
    back soon after Redis is."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.errors = 0
        self.passes = 0
        """Passes that succeeded."""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The running loop (None before :meth:`start`): for liveness checks."""
        return self._task

    async def tick(self) -> None:
        raise NotImplementedError

    async def run(self, *, first_after_s: float = 0.0) -> None:
        await self._sleep(first_after_s)
        backoff = min(BACKOFF_INITIAL_S, self.interval_s)
        while not self._stop.is_set():
            raise_if_cancelling()
            try:
                await self.tick()
            except TRANSIENT_ERRORS as exc:
                self.errors += 1
                log.warning(self.failure_event, error=repr(exc), retry_in_s=backoff)
            except Exception:
                self.errors += 1
                log.exception(self.failure_event, retry_in_s=backoff)
            else:
                self.passes += 1
                backoff = min(BACKOFF_INITIAL_S, self.interval_s)
                await self._sleep(self.interval_s)
                continue
            await self._sleep(backoff)
            backoff = min(backoff * 2, self.interval_s, self.retry_max_s or self.interval_s)

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once on :meth:`stop`."""
        if seconds > 0:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), seconds)

    def start(self, *, first_after_s: float = 0.0) -> asyncio.Task[None]:
        """Run the loop in a task (once; again after it ended); its first pass after ``first_after_s``."""
        if self._task is None or self._task.done():
            self._stop.clear()
            self._task = asyncio.create_task(self.run(first_after_s=first_after_s), name=self.task_name)
        return self._task

    async def stop(self) -> None:
        self._stop.set()
        task = self._task
        if task is not None and task is not asyncio.current_task():
            with contextlib.suppress(asyncio.CancelledError):
                await task
