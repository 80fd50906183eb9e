"""Job slots: run up to ``size`` long jobs of one consumer at once, each entry acked as soon as its job ends.

A ``BatchConsumer`` settles a batch when its handler returns: right for entries handled in microseconds,
wrong for jobs that last from milliseconds to minutes (tool calls), where a batch holds every slot until
its slowest job ends. With slots, the consumer reads one entry at a time (``count=1``); its handler
starts the entry's job in a free slot (:meth:`JobSlots.start`) and returns once a slot is free again
(:meth:`JobSlots.until_free`), acking nothing itself: the job's task XACKs its entry when the job is done.
A slot is refilled the moment it frees, and a worker holds no more entries than it runs — the rest wait in
the stream for whichever worker frees a slot first.

Still at-least-once: a job writes its effects (idempotently) before its entry is acked. A job that raises,
or is cancelled at shutdown, leaves its entry pending, for the consumer's recovery path (XAUTOCLAIM after
the idle time, delivery counts, dead letter after ``max_deliveries``). An entry re-read while its job runs
(a consumer re-reads its own pending list after a reconnect) is not started twice (:meth:`JobSlots.holds`).

One worker's slots serve the consumers of every shard's stream: a job is known by its entry's stream and
id together (:attr:`StreamEntry.key`), since two shards' streams give entries written in the same
millisecond the same id.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import redis.asyncio as aioredis
import structlog

from agentbus_redis.runtime.batch import ConsumerStats
from agentbus_redis.streams.entries import EntryKey, StreamEntry

log = structlog.get_logger(__name__)

Job = Callable[[], Awaitable[None]]


class JobSlots:
    """At most ``size`` jobs at once; see the module docstring."""

    def __init__(self, redis: aioredis.Redis, *, group: str, size: int) -> None:
        if size < 1:
            msg = f"job slots need a size of at least 1, not {size}"
            raise ValueError(msg)
        self.redis = redis
        self.group = group
        self.size = size
        self.stats = ConsumerStats()
        """Acks and job failures are counted here: give it the consumer's stats so its metrics include them."""
        self._running: dict[EntryKey, asyncio.Task[None]] = {}
        self._freed = asyncio.Event()
        self._closing = False

    @property
    def busy(self) -> int:
        return len(self._running)

    def holds(self, entry: StreamEntry) -> bool:
        """Whether ``entry``'s job (this entry of this stream) is running in a slot now."""
        return entry.key in self._running

    async def until_free(self) -> None:
        """Return once a slot is free (at once while closing: nothing more will be started)."""
        while len(self._running) >= self.size and not self._closing:
            self._freed.clear()
            await self._freed.wait()

    async def start(self, entry: StreamEntry, job: Job) -> None:
        """Run ``job`` for ``entry`` in a slot (waiting for a free one first); the entry is acked when the
        job returns."""
        while len(self._running) >= self.size:
            self._freed.clear()
            await self._freed.wait()
        self._running[entry.key] = asyncio.create_task(
            self._run(entry, job), name=f"slot:{entry.stream}:{entry.entry_id}"
        )
        # The job runs to its first round trip now, before the consumer settles its batch and sends its next
        # read: a model call's lease + state read went out ~0.4 ms of consumer CPU later otherwise (issue 31).
        await asyncio.sleep(0)

    async def _run(self, entry: StreamEntry, job: Job) -> None:
        try:
            try:
                await job()
            except Exception as exc:
                self.stats.handler_errors += 1
                log.warning("slot_job_failed", stream=entry.stream, entry_id=entry.entry_id, error=repr(exc))
                return  # stays pending: reclaimed after the idle time, dead-lettered after max_deliveries
            await self._ack(entry)
        finally:
            self._running.pop(entry.key, None)
            self._freed.set()

    async def _ack(self, entry: StreamEntry) -> None:
        try:
            acked = await self.redis.xack(entry.stream, self.group, entry.entry_id)
        except aioredis.RedisError as exc:
            # Still pending: re-read from this consumer's pending list (or reclaimed) and run again; the
            # job's effects are idempotent.
            log.warning("slot_ack_failed", stream=entry.stream, entry_id=entry.entry_id, error=repr(exc))
            return
        self.stats.acked += int(acked)

    def close(self) -> None:
        """Shutdown begins: :meth:`until_free` stops waiting (the consumer is stopping its reads)."""
        self._closing = True
        self._freed.set()

    async def finish(self, *, timeout_s: float | None) -> None:
        """Wait for the running jobs (and their acks); after ``timeout_s`` cancel the rest, whose entries
        stay pending and are redelivered."""
        running = list(self._running.values())
        if not running:
            return
        _, late = await asyncio.wait(running, timeout=timeout_s)
        for task in late:
            task.cancel()
        for task in late:
            with contextlib.suppress(asyncio.CancelledError):
                await task
