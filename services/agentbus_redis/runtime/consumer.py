"""The batched consume loop: the hot path of every worker (redis-streams-baseline.md §4, §8).

One ``BatchConsumer`` reads one stream through one consumer group as one consumer, on a connection of its
own. Per batch it costs two round trips whatever the batch size: ``XREADGROUP COUNT n BLOCK ms`` and ONE
script call (``key_calls.py``) that writes the outputs, the handler's commands, the dead letters and a
single multi-id ``XACK``, in that order and atomically: an ack never lands without the outputs before it
(at-least-once), and a crash applies a batch completely or not at all. Fenced consumers (the shard
lanes) run the script only while their lease epoch still holds, and send their next (fenced) read in the
same packet as the script: one round trip per batch (``_settle_then_read``; the script's reply is read as
soon as it ran, the read's once it answers).

Recovery paths, all off the hot path:
- start (and after any connection loss): re-read this consumer's own pending list (id ``0``) so a
  restarted consumer re-processes what it had in hand;
- unordered consumers: a periodic ``XAUTOCLAIM`` takes over entries idle for ``claim_min_idle_ms``
  (dead consumers, failed batches); delivery counts come from ``XPENDING`` and an entry delivered more
  than ``max_deliveries`` times is dead-lettered with its history;
- ordered consumers (shard lanes, one reader per stream): when the handler raises for a batch, the batch
  is narrowed to the entry that fails (bisected; each part that succeeds is settled before the next is
  handled, so a handler reading state earlier entries wrote sees it); that entry blocks the lane: the
  consumer backs off and retries it alone until it succeeds or is dead-lettered after ``max_deliveries``
  handler failures with the handler's last exception (counted apart from deliveries: ``failure_counts.py``).
  A new owner moves the shard's pending entries to itself without counting a delivery (``JUSTID``) and
  re-reads them in runs, an entry that was in hand twice with no outcome alone: only an entry that takes
  its process down reaches the crash-loop ceiling, not the healthy entries of its batches.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis
import structlog
from redis.asyncio.connection import AbstractConnection
from redis.exceptions import ResponseError

from agentbus_redis.runtime import connection_calls, failure_counts, fenced_reads
from agentbus_redis.runtime.batch import (
    BatchHandler,
    BatchOutcome,
    CallWriter,
    ConsumerConfig,
    ConsumerStats,
    Fence,
    FieldValue,
    Output,
    OutputWriteError,
    Poison,
    raise_if_cancelling,
)
from agentbus_redis.runtime.key_calls import Fenced, KeyCalls
from agentbus_redis.runtime.redis_client import REDIS_UNAVAILABLE_ERRORS, TRANSIENT_ERRORS, lane_client
from agentbus_redis.streams.deadletter import (
    REASON_ENTRY_DELETED,
    REASON_HANDLER_FAILED,
    REASON_OUTPUT_WRITE_FAILED,
    DeadLetter,
)
from agentbus_redis.streams.entries import (
    RawEntry,
    StreamEntry,
    decode_entries,
    decode_rows,
    id_text,
    stream_reply_entries,
)
from agentbus_redis.streams.names import dead_letter_stream

log = structlog.get_logger(__name__)

_TRANSIENT = TRANSIENT_ERRORS
_REDIS_UNAVAILABLE = REDIS_UNAVAILABLE_ERRORS
"""Raised by an ordered lane's handler (it reads Redis), these are an outage, not the entries' fault: the loop's
outage handling takes them and no failure is recorded against an entry. (An ``OSError`` of a handler, e.g.
a transcript file that cannot be written, is the entry's.)"""


class _WriteCallbackFailed(Exception):
    """A handler's ``write`` callback raised while a batch's script was being built (nothing was sent)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(repr(cause))
        self.cause = cause


__all__ = [
    "BatchConsumer",
    "BatchHandler",
    "BatchOutcome",
    "CallWriter",
    "ConsumerConfig",
    "ConsumerStats",
    "Fence",
    "Fenced",
    "FieldValue",
    "Output",
    "OutputWriteError",
    "Poison",
    "raise_if_cancelling",
]


class BatchConsumer:
    """Consume ``stream`` as ``consumer`` of ``group`` in batches; see the module docstring.

    ``redis`` must return bytes (``decode_responses=False``, the default): values reach handlers as the
    exact bytes stored. ``consumer`` should be stable across restarts of the same instance (e.g. the pod
    name) so a restarted consumer finds its own pending entries.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        *,
        stream: str,
        group: str,
        consumer: str,
        handler: BatchHandler,
        config: ConsumerConfig | None = None,
        may_read: Callable[[], bool] | None = None,
    ) -> None:
        self.redis = lane_client(redis, stream)
        """One dedicated connection from ``redis``'s pool: the loop sends one command at a time, and checking
        a connection out of the pool per command (lock, liveness probe, accounting) cost ~100 µs each on
        this VM, a visible share of a small batch. Returned to the pool when the loop ends. On a Redis
        Cluster, pinned to the node serving the stream's slot (``redis_client.py``): every command of the
        loop names the stream's shard keys only."""
        self.may_read = may_read
        """Asked before every read: False pauses the loop (a shard lane whose lease may have lapsed, e.g.
        after this process was paused, reads nothing until the lease loop renews or gives the shard up)."""
        self.stream = stream
        self.group = group
        self.consumer = consumer
        self.handler = handler
        self.config = config if config is not None else ConsumerConfig()
        self.dead_letter_stream = self.config.dead_letter_stream or dead_letter_stream(stream)
        self.stats = ConsumerStats()
        self.failure: BaseException | None = None
        """The exception the loop died of (None while it runs or after a clean stop)."""
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._group_ready = False
        self._need_drain = True
        self._need_takeover = self.config.claim_all_on_start
        self._wait_after: str | None = None
        """Fenced reads: wait for entries after this id before the next read (None: read at once)."""
        self._read_ahead: fenced_reads.ReadRequest | None = None
        """A fenced read sent behind the last batch's settle script, in the same packet: its replies are still
        due on the connection (the next step reads them)."""
        self._last_read: fenced_reads.ReadRequest | None = None
        """The fenced read asked last (:meth:`_next_read`)."""
        self._next_claim = time.monotonic() + self.config.claim_interval_s
        self._connect_backoff = self.config.backoff_initial_s
        self._lane_backoff = self.config.backoff_initial_s
        self._failed: set[str] = set()
        """Entries of this stream with handler failures recorded (their records go when they are settled)."""
        self._retry_alone = False
        """An ordered lane is blocked by the entry that failed last: re-read it alone (it is the oldest pending
        entry), so the entries behind it are not delivered again and again while it fails."""
        self._blocked_on: str | None = None
        """The entry an ordered lane failed on last (its retry backoff grows while it stays the same)."""
        self._log = log.bind(stream=stream, group=group, consumer=consumer)

    @property
    def last_progress_monotonic(self) -> float:
        return self.stats.last_progress_monotonic

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    async def ensure_group(self) -> None:
        """Create the group at id ``0`` (MKSTREAM) so entries written before startup are read too."""
        try:
            await self.redis.xgroup_create(self.stream, self.group, id="0", mkstream=True)
        except ResponseError as exc:
            if not str(exc).startswith("BUSYGROUP"):
                raise
        self._group_ready = True

    def start(self) -> asyncio.Task[None]:
        """Run the loop in a task (``run`` does the same in the caller's task)."""
        if self._task is None or self._task.done():
            self._stop.clear()
            self._task = asyncio.create_task(self.run(), name=f"consumer:{self.stream}:{self.consumer}")
        return self._task

    async def stop(self, *, timeout_s: float | None = None) -> None:
        """Finish and ack the batch in hand, then return. After ``timeout_s`` the loop is cancelled
        (the batch in hand then stays pending and is redelivered)."""
        self._stop.set()
        task = self._task
        if task is None or task is asyncio.current_task():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def run(self) -> None:
        """The loop: recover, then read new entries, until ``stop``."""
        try:
            await self._loop()
        except Exception as exc:
            # A task's exception is otherwise seen by nobody until garbage collection: say it now, and keep
            # it for the liveness check (a dead lane must not look merely idle for a minute).
            self.failure = exc
            self._log.exception("consumer_crashed")
            raise
        finally:
            await self.redis.aclose()

    async def _loop(self) -> None:
        # A read already sent is finished (and its batch handled) before the loop stops, as a blocked read is.
        while not self._stop.is_set() or self._read_ahead is not None:
            raise_if_cancelling()
            try:
                await self._step()
            except Fenced as fenced:
                # Another worker owns the shard now: it re-reads what we had in hand. Stop reading; the
                # lease loop notices the lost lease at its next renewal and tells the worker.
                self.stats.fenced += 1
                self._log.warning("consumer_fenced_out", key=fenced.key, token=fenced.token)
                self._stop.set()
                return
            except _TRANSIENT as exc:
                await self._forget_read_ahead()
                await self._on_transient(exc)
                continue
            except ResponseError as exc:
                if not str(exc).startswith("NOGROUP"):
                    raise
                await self._forget_read_ahead()
                # The stream or group vanished (e.g. Redis restarted without persistence): recreate it.
                self._log.warning("consumer_group_missing", error=str(exc))
                self._group_ready = False
                self._need_drain = True
                continue
            self.stats.connected = True
            self._connect_backoff = self.config.backoff_initial_s
            self.stats.last_progress_monotonic = time.monotonic()

    async def _step(self) -> None:
        if self._read_ahead is not None:
            await self._read_new()  # sent with the last settle script: only its replies are left to read
            return
        if self.may_read is not None and not self.may_read():
            await self._sleep(self.config.backoff_initial_s)
            return
        if not self._group_ready:
            await self.ensure_group()
        if self._need_takeover:
            await self._claim(min_idle_ms=0, max_pages=None)
            self._need_takeover = False
        elif self._need_drain:
            if await self._drain_own_pending():
                # An ordered lane is blocked by a failing entry: retry it later, nothing newer meanwhile.
                await self._sleep(self._lane_backoff)
                self._lane_backoff = min(self._lane_backoff * 2, self.config.backoff_max_s)
            else:
                self._need_drain = False
                self._lane_backoff = self.config.backoff_initial_s
        elif not self.config.ordered and time.monotonic() >= self._next_claim:
            await self._claim(min_idle_ms=self.config.claim_min_idle_ms, max_pages=self.config.claim_max_pages)
            self._next_claim = time.monotonic() + self.config.claim_interval_s
        else:
            await self._read_new()

    async def _on_transient(self, exc: BaseException) -> None:
        self.stats.connection_errors += 1
        self.stats.connected = False
        self._log.warning("redis_unavailable", error=repr(exc), retry_in_s=self._connect_backoff)
        # What was in hand may or may not have been acked: re-read our pending list once Redis is back.
        self._need_drain = True
        await self._sleep(self._connect_backoff)
        self._connect_backoff = min(self._connect_backoff * 2, self.config.backoff_max_s)
        # The loop is alive while Redis is down: liveness must not fail on a Redis outage.
        self.stats.last_progress_monotonic = time.monotonic()

    async def _sleep(self, seconds: float) -> None:
        """Sleep, but wake up at once on ``stop``."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stop.wait(), seconds)

    async def _read_new(self) -> None:
        if self.config.fence is not None:
            rows = await self._read_new_fenced(self.config.fence)
            if not rows:
                return
            entries, deleted = decode_rows(self.stream, rows)
        else:
            reply = await self.redis.xreadgroup(
                self.group, self.consumer, {self.stream: ">"}, count=self.config.count, block=self.config.block_ms
            )
            raw = stream_reply_entries(reply)
            if not raw:
                return
            entries, deleted = decode_entries(self.stream, raw)
        if await self._process(entries, deleted, fresh=True):
            self._need_drain = True

    async def _read_new_fenced(self, fence: Fence) -> list[Any]:
        """Take new entries only while ``fence`` holds (``fenced_reads.py``): after a batch that did not fill
        ``count``, the read first waits, in the same round trip, with an ``XREAD BLOCK`` that takes nothing (it
        answers at once when more is there). Usually the read went out with the last batch's settle script
        (:meth:`_settle_then_read`) and only its replies are left to read."""
        request, self._read_ahead = self._read_ahead, None
        connection: AbstractConnection | None = self.redis.connection
        if request is None or connection is None:
            request = self._next_read(fence)
            connection = await connection_calls.send(self.redis, request.commands())
        read = await fenced_reads.read_replies(self.redis, connection, request)
        if read.wait_after is not None:
            self._wait_after = read.wait_after
        elif len(read.rows) < self.config.count:
            self._wait_after = read.rows[-1][0].decode("ascii")
        else:
            self._wait_after = None
        return read.rows

    def _next_read(self, fence: Fence) -> fenced_reads.ReadRequest:
        last, config = self._last_read, self.config
        if (
            last is not None
            and last.wait_after == self._wait_after
            and last.fence is fence
            and last.count == config.count
            and last.block_ms == config.block_ms
        ):
            return last  # immutable, and every field the same: a busy lane asks the same read batch after batch
        self._last_read = fenced_reads.ReadRequest(
            fence,
            self.stream,
            self.group,
            self.consumer,
            self.config.count,
            wait_after=self._wait_after,
            block_ms=self.config.block_ms,
        )
        return self._last_read

    def _reads_next(self) -> bool:
        """Whether the step after this batch will be a plain read of new entries (so it may go out with the
        batch's settle script)."""
        return (
            not self._stop.is_set()
            and not self._need_takeover
            and not self._need_drain
            and (self.may_read is None or self.may_read())
        )

    async def _forget_read_ahead(self) -> None:
        """Drop a read sent ahead, with the connection its replies were due on; whatever it took is re-read
        from this consumer's pending list."""
        if self._read_ahead is not None:
            self._read_ahead = None
            self._need_drain = True
            await connection_calls.drop(self.redis)

    async def _drain_own_pending(self) -> bool:
        """Re-process this consumer's pending entries, oldest first. True when an ordered lane is blocked."""
        last_id = "0"
        while not self._stop.is_set():
            count = await self._drain_count(last_id)
            reply = await self.redis.xreadgroup(self.group, self.consumer, {self.stream: last_id}, count=count)
            raw = stream_reply_entries(reply)
            if not raw:
                return False
            last_id = raw[-1][0].decode("ascii")
            entries, deleted = decode_entries(self.stream, raw)
            if await self._process(entries, deleted, fresh=False):
                return True
        return False

    async def _drain_count(self, after: str) -> int:
        """How many of this consumer's pending entries after ``after`` to re-read at once. An ordered lane takes
        the entry that blocks it alone, and a suspect alone (``failure_counts.is_suspect``: it may be what took
        the process down), else the run of entries before the next suspect. Off the hot path (recovery only)."""
        if not self.config.ordered:
            return self.config.count
        if self._retry_alone:
            self._retry_alone = False
            return 1
        low = "-" if after == "0" else "(" + after
        rows = await self.redis.xpending_range(
            self.stream, self.group, low, "+", self.config.count, consumername=self.consumer
        )
        ids = [id_text(row["message_id"]) for row in rows]
        if not ids:
            return self.config.count
        failures = await failure_counts.read_failures(self.redis, self.stream, self.group, ids)
        for run, (entry_id, row) in enumerate(zip(ids, rows, strict=True)):
            if failure_counts.is_suspect(int(row["times_delivered"]), failures.get(entry_id, 0)):
                return max(run, 1)
        return len(ids)

    async def _claim(self, *, min_idle_ms: int, max_pages: int | None) -> None:
        """XAUTOCLAIM pending entries idle for ``min_idle_ms`` (any consumer's, this one's included)."""
        if self.config.ordered:
            await self._take_over_pending()
            return
        start = "0-0"
        pages = 0
        while not self._stop.is_set():
            next_start, raw_entries, deleted_ids = await self._autoclaim(min_idle_ms, start)
            entries, deleted = decode_entries(self.stream, raw_entries)
            deleted += deleted_ids
            self.stats.reclaimed += len(entries)
            if entries or deleted:
                self._log.info("entries_reclaimed", count=len(entries), deleted=len(deleted))
                if await self._process(entries, deleted, fresh=False):
                    self._need_drain = True
                    return
            pages += 1
            start = next_start
            if start == "0-0" or (max_pages is not None and pages >= max_pages):
                return

    async def _take_over_pending(self) -> None:
        """A new lane owner: move every pending entry of the group to this consumer without counting a delivery
        (``XAUTOCLAIM … JUSTID``), then re-read them as its own pending list (``_drain_count``), so an entry that
        keeps taking its owners down is handled alone and the others of its batch are not delivered with it."""
        start = "0-0"
        while not self._stop.is_set():
            calls = KeyCalls()
            calls.add(
                "XAUTOCLAIM", self.stream, self.group, self.consumer, 0, start, "COUNT", self.config.count, "JUSTID"
            )
            next_start, claimed, deleted = await self._write(calls)
            self.stats.reclaimed += len(claimed)
            if claimed or deleted:
                self._log.info("entries_reclaimed", count=len(claimed), deleted=len(deleted))
            if deleted:
                await self._process([], [id_text(entry_id) for entry_id in deleted], fresh=False)
            start = id_text(next_start)
            if start == "0-0":
                break
        self._need_drain = True

    async def _autoclaim(self, min_idle_ms: int, start: str) -> tuple[str, list[RawEntry], list[str]]:
        """One XAUTOCLAIM page: (next start, entries, ids of deleted entries); fenced for shard lanes."""
        fence = self.config.fence
        if fence is not None:
            claimed = await fenced_reads.claim(
                self.redis,
                fence,
                self.stream,
                self.group,
                self.consumer,
                count=self.config.count,
                min_idle_ms=min_idle_ms,
                start=start,
            )
            return claimed.next_start, claimed.entries, claimed.deleted
        next_id, raw, deleted_ids = await self.redis.xautoclaim(
            self.stream, self.group, self.consumer, min_idle_ms, start, count=self.config.count
        )
        return next_id.decode("ascii"), list(raw), [raw_id.decode("ascii") for raw_id in deleted_ids]

    async def _delivery_counts(self, ids: Sequence[str]) -> dict[str, int]:
        """Delivery counts of ``ids`` in this consumer's pending list (XPENDING range form).

        Ids missing from the result are no longer ours (acked, or claimed by another consumer since).
        """
        wanted = set(ids)
        counts: dict[str, int] = {}
        low, high = ids[0], ids[-1]
        while True:
            rows = await self.redis.xpending_range(
                self.stream, self.group, low, high, max(len(ids), 100), consumername=self.consumer
            )
            for row in rows:
                entry_id = id_text(row["message_id"])
                if entry_id in wanted:
                    counts[entry_id] = int(row["times_delivered"])
            if len(rows) < max(len(ids), 100) or len(counts) == len(wanted):
                return counts
            low = "(" + id_text(rows[-1]["message_id"])

    async def _process(self, entries: list[StreamEntry], deleted: list[str], *, fresh: bool) -> bool:
        """Run the handler on ``entries`` and write the outcome; dead-letter what cannot be processed.

        Returns True when an ordered lane is blocked by a failing entry.
        """
        now_ms = int(time.time() * 1000)
        letters = [self._letter_of_deleted(entry_id, now_ms) for entry_id in deleted]
        live = await self._with_chances_left(entries, letters, now_ms) if not fresh and entries else entries
        self.stats.consumed += len(live)
        if not fresh:  # a fresh read's entries are first deliveries (delivery count 1): none was redelivered
            self.stats.redelivered += sum(1 for entry in live if entry.delivery_count > 1)
        if self.config.ordered:
            return await self._handle_in_order(live, letters, now_ms, read_ahead=fresh)
        done = await self._handle_each(live)
        with contextlib.suppress(_WriteCallbackFailed):  # nothing was sent: every entry stays pending
            await self._settle(done, letters, now_ms)
        return False

    async def _with_chances_left(
        self, entries: list[StreamEntry], letters: list[DeadLetter], now_ms: int
    ) -> list[StreamEntry]:
        """Redelivered ``entries`` with their delivery counts, less those no longer ours and those that have had
        their chances (their dead letters are added to ``letters``)."""
        ids = [entry.entry_id for entry in entries]
        counts = await self._delivery_counts(ids)
        ordered = self.config.ordered
        failures = await failure_counts.read_failures(self.redis, self.stream, self.group, ids) if ordered else {}
        self._failed.update(failures)
        live: list[StreamEntry] = []
        exhausted: list[tuple[StreamEntry, str, str]] = []
        for entry in entries:
            count = counts.get(entry.entry_id)
            if count is None:
                continue
            counted = replace(entry, delivery_count=count)
            verdict = failure_counts.exhausted(
                count, failures.get(entry.entry_id, 0), self.config.max_deliveries, ordered=ordered
            )
            if verdict is None:
                live.append(counted)
            else:
                exhausted.append((counted, *verdict))
        failed = [entry.entry_id for entry, reason, _ in exhausted if reason == REASON_HANDLER_FAILED]
        errors = await failure_counts.read_errors(self.redis, self.stream, self.group, failed) if failed else {}
        for entry, reason, detail in exhausted:
            error = errors.get(entry.entry_id)
            letters.append(self._letter(entry, reason, f"{error} ({detail})" if error else detail, now_ms))
        return live

    async def _handle_each(self, live: list[StreamEntry]) -> list[tuple[list[StreamEntry], BatchOutcome]]:
        """Unordered: call the handler; on failure retry entry by entry so one bad entry does not sink the
        batch (a failing entry stays pending: ``XAUTOCLAIM`` retries it, its deliveries count)."""
        if not live:
            return []
        try:
            return [(live, await self.handler(live))]
        except Exception as exc:
            self.stats.handler_errors += 1
            self._log.warning("batch_handler_failed", size=len(live), error=repr(exc))
            if len(live) == 1:
                return []
        done: list[tuple[list[StreamEntry], BatchOutcome]] = []
        for entry in live:
            try:
                done.append(([entry], await self.handler([entry])))
            except Exception as exc:
                self.stats.handler_errors += 1
                self._log_entry_failed(entry, exc)
        return done

    async def _handle_in_order(
        self, live: list[StreamEntry], letters: list[DeadLetter], now_ms: int, *, read_ahead: bool
    ) -> bool:
        """Ordered: handle and settle ``live`` as one batch (the hot path: one script, the next read with it).
        When the handler raises, bisect: settle each half that succeeds before handling what follows it (a
        handler reads state earlier entries wrote), until the one entry that fails is found; record its
        failure and block the lane on it. Returns True when blocked."""
        error = await self._attempt(live, letters, now_ms, read_ahead=read_ahead)
        if error is None:
            return False
        if len(live) > 1:
            self._log.warning("batch_handler_failed", size=len(live), error=repr(error))
        # The handler saw these entries in an attempt whose outcome was thrown away: a delivery count over 1
        # tells it to trust nothing it cached of them (ingestion's ledgers, normalization's histories).
        failed = [replace(entry, delivery_count=entry.delivery_count + 1) for entry in live] if len(live) > 1 else live
        while len(failed) > 1:
            head, tail = failed[: len(failed) // 2], failed[len(failed) // 2 :]
            head_error = await self._attempt(head, letters, now_ms)
            if head_error is not None:
                failed, error = head, head_error
                continue
            letters = []  # written with the head
            tail_error = await self._attempt(tail, letters, now_ms)
            if tail_error is None:
                return False
            failed, error = tail, tail_error
        await self._record_failure(failed[0], error, letters)
        return True

    async def _attempt(
        self, part: list[StreamEntry], letters: list[DeadLetter], now_ms: int, *, read_ahead: bool = False
    ) -> Exception | None:
        """Handle ``part`` and settle it with ``letters`` in one script. Returns the exception when the handler
        or its ``write`` callback raised (then nothing was written)."""
        try:
            outcome = await self.handler(part) if part else BatchOutcome()
        except _REDIS_UNAVAILABLE:
            raise
        except Exception as error:
            self.stats.handler_errors += 1
            return error
        try:
            await self._settle([(part, outcome)] if part else [], letters, now_ms, read_ahead=read_ahead)
        except _WriteCallbackFailed as failed:
            return failed.cause
        return None

    async def _record_failure(self, entry: StreamEntry, error: Exception, letters: list[DeadLetter]) -> None:
        """Ordered lanes: count a handler failure of ``entry`` with its ``error`` (and write ``letters`` not yet
        written), fenced like every lane write; the lane then retries ``entry`` alone."""
        self._log_entry_failed(entry, error)
        calls = KeyCalls()
        failure_counts.queue_failures(
            calls, self.stream, self.group, [entry.entry_id], error=failure_counts.error_text(error)
        )
        await self._write_atomically(calls, letters, [letter.entry_id for letter in letters])
        self.stats.dead_lettered += len(letters)
        self._failed.add(entry.entry_id)
        self._retry_alone = True
        if entry.entry_id != self._blocked_on:
            # Another entry blocks the lane now: the one before it is settled, so its retries start over quickly.
            self._blocked_on = entry.entry_id
            self._lane_backoff = self.config.backoff_initial_s

    def _log_entry_failed(self, entry: StreamEntry, error: Exception) -> None:
        self._log.warning(
            "entry_handler_failed", entry_id=entry.entry_id, delivery_count=entry.delivery_count, error=repr(error)
        )

    async def _write(self, calls: KeyCalls) -> Any:
        """Run ``calls`` as one script, fenced when this consumer is (a shard lane)."""
        fence = self.config.fence
        if fence is None:
            return await calls.write(self.redis)
        return await calls.write_fenced(self.redis, key=fence.key, token=fence.token)

    async def _settle(
        self,
        done: list[tuple[list[StreamEntry], BatchOutcome]],
        letters: list[DeadLetter],
        now_ms: int,
        *,
        read_ahead: bool = False,
    ) -> None:
        """Write every output, dead letter and one multi-id XACK (:meth:`_write_settlement`); with
        ``read_ahead``, a fenced lane sends its next read in the same packet (:meth:`_settle_then_read`).

        Raises :class:`_WriteCallbackFailed` when a handler's ``write`` callback raised while the batch was
        being built (nothing is sent, exactly as if the handler itself had raised).
        """
        letters = [*letters]  # the batch's poison joins them: the caller's list stays as it was
        ack_ids: list[str] = [letter.entry_id for letter in letters]
        acked_entries: list[StreamEntry] = []
        for batch, outcome in done:
            by_id = {entry.entry_id: entry for entry in batch}
            if outcome.ack is None and not outcome.poison:
                # The usual outcome, every entry acked and none poison: what the loop below appends, in bulk.
                ack_ids.extend(by_id)
                acked_entries.extend(by_id.values())
                continue
            for entry_id, poison in outcome.poison.items():
                entry = by_id.get(entry_id)
                if entry is None:
                    msg = f"{self.stream}: handler marked {entry_id} poison but it is not in the batch"
                    raise ValueError(msg)
                letters.append(self._letter(entry, poison.reason, poison.detail, now_ms))
                ack_ids.append(entry_id)
            to_ack = by_id.keys() if outcome.ack is None else outcome.ack
            for entry_id in to_ack:
                if entry_id in outcome.poison:
                    continue
                if entry_id not in by_id:
                    msg = f"{self.stream}: handler acked {entry_id} but it is not in the batch"
                    raise ValueError(msg)
                ack_ids.append(entry_id)
                acked_entries.append(by_id[entry_id])
        if not ack_ids and not any(outcome.outputs or outcome.write for _, outcome in done):
            _notify_settled(done)
            return
        await self._write_settlement(done, letters, ack_ids, acked_entries, now_ms, read_ahead=read_ahead)

    async def _write_settlement(
        self,
        done: list[tuple[list[StreamEntry], BatchOutcome]],
        letters: list[DeadLetter],
        ack_ids: list[str],
        acked: list[StreamEntry],
        now_ms: int,
        *,
        read_ahead: bool = False,
    ) -> None:
        """Write the batch as ONE script (``key_calls.py``): outputs, the handler's commands, dead letters,
        then the XACK — all of it or, when the fence moved on, nothing (raises :class:`Fenced`).

        A call Redis rejects (WRONGTYPE, OOM, …) stops the script, leaving the calls before it applied (as
        a failed command inside a MULTI/EXEC would): the batch's entries are then dead-lettered with the
        error and acked, so an operator can replay them once the cause is fixed.
        """
        calls, produced = self._collect_writes(done)
        try:
            acked_count = await self._write_atomically(calls, letters, ack_ids, read_ahead=read_ahead)
        except ResponseError as error:
            self.stats.write_errors += 1
            entry_ids = [entry.entry_id for entry in acked] + [letter.entry_id for letter in letters]
            self._log.error("batch_write_failed", entry_ids=entry_ids, error=str(error))
            detail = str(error)[:500]
            retry = [self._letter(entry, REASON_OUTPUT_WRITE_FAILED, detail, now_ms) for entry in acked] + letters
            try:
                await self._write_atomically(KeyCalls(), retry, ack_ids)
            except ResponseError as second:
                raise OutputWriteError(self.stream, entry_ids, [error, second]) from second
            self.stats.batches += 1
            self.stats.dead_lettered += len(retry)
            return
        _notify_settled(done)
        self.stats.batches += 1
        self.stats.produced += produced
        self.stats.dead_lettered += len(letters)
        self.stats.acked += int(acked_count) if ack_ids else 0

    async def _write_atomically(
        self, calls: KeyCalls, letters: list[DeadLetter], ack_ids: list[str], *, read_ahead: bool = False
    ) -> Any:
        """Append the dead letters and the XACK to ``calls`` and run them as one (fenced) script."""
        for letter in letters:
            calls.add_xadd(self.dead_letter_stream, letter.to_stream_fields())
        settled_failures = [entry_id for entry_id in ack_ids if entry_id in self._failed] if self._failed else []
        failure_counts.queue_forget(calls, self.stream, self.group, settled_failures)
        calls.add_members("XACK", self.stream, list(ack_ids), self.group)
        fence = self.config.fence
        if fence is not None and read_ahead and self._reads_next():
            reply = await self._settle_then_read(calls, fence)
        else:
            reply = await self._write(calls)
        self._failed.difference_update(settled_failures)
        return reply

    async def _settle_then_read(self, calls: KeyCalls, fence: Fence) -> Any:
        """Send the batch's script and the next read in one packet (``connection_calls.py``) and answer the
        script's reply: one round trip per batch instead of two. Redis runs the read only after the script,
        so it takes nothing before the batch is settled; the read's replies are left for the next step."""
        request = self._next_read(fence)
        command = calls.fenced_command(key=fence.key, token=fence.token)
        connection = await connection_calls.send(self.redis, [command, *request.commands()])
        self._read_ahead = request
        reply = await connection_calls.next_reply(connection)
        if isinstance(reply, Exception):
            # The read behind a script that did not run (not loaded, fenced, failed) is not wanted now.
            await self._forget_read_ahead()
            return await calls.retry_fenced(self.redis, key=fence.key, token=fence.token, error=reply)
        return reply

    def _collect_writes(self, done: list[tuple[list[StreamEntry], BatchOutcome]]) -> tuple[KeyCalls, int]:
        """Every output XADD and the handlers' extra commands, in order, with the number of outputs; raises
        :class:`_WriteCallbackFailed` when a handler's ``write`` callback raised (then nothing is sent)."""
        calls = KeyCalls()
        produced = 0
        try:
            for _, outcome in done:
                calls.add_xadds(outcome.outputs)
                produced += len(outcome.outputs)
                if outcome.write is not None:
                    outcome.write(calls)
        except Exception as exc:
            self.stats.handler_errors += 1
            entry_ids = [entry.entry_id for batch, _ in done for entry in batch]
            self._log.warning("batch_write_callback_failed", entry_ids=entry_ids, error=repr(exc))
            raise _WriteCallbackFailed(exc) from exc
        return calls, produced

    def _letter(self, entry: StreamEntry, reason: str, detail: str, now_ms: int) -> DeadLetter:
        return DeadLetter.of_entry(
            entry, group=self.group, consumer=self.consumer, reason=reason, detail=detail, at_ms=now_ms
        )

    def _letter_of_deleted(self, entry_id: str, now_ms: int) -> DeadLetter:
        return DeadLetter(
            stream=self.stream,
            group=self.group,
            entry_id=entry_id,
            consumer=self.consumer,
            delivery_count=0,
            reason=REASON_ENTRY_DELETED,
            detail="deleted or trimmed from the stream while pending",
            at_ms=now_ms,
            fields={},
        )


def _notify_settled(done: list[tuple[list[StreamEntry], BatchOutcome]]) -> None:
    """Tell each handler that its batch was written completely (see ``BatchOutcome.on_settled``)."""
    for _, outcome in done:
        if outcome.on_settled is not None:
            outcome.on_settled()
