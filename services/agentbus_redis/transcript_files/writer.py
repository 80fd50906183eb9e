"""The durable JSONL appender: whole lines, group commit, no fsync per line.

Policy (redis-streams-baseline.md §7 on this machine: fsync per line ≈ 6k lines/s, write + group fsync
≈ 176k lines/s):

* ``append(lines)`` writes the whole batch at once (``\\n``-terminated lines, one ``write`` loop, into
  the page cache) and returns a future. The future resolves once an ``fsync`` that started *after* the
  batch was written has finished, i.e. when the batch is durable.
* One background task per file runs the fsyncs in a worker thread. Batches written while an fsync is
  running are covered by the next one, and two fsyncs start at least ``min_sync_interval_s`` apart, so
  any number of concurrent writers share one fsync. With the store's
  :class:`~agentbus_redis.transcript_files.filesystem_sync.FilesystemSync` an append's future is answered by the
  next shared ``syncfs`` round instead, with no task of its own (the task remains only for appends
  queued behind an exclusive rewrite).
* The fsync threads are a pool of their own (:data:`FSYNC_THREADS`), not the event loop's default
  executor: a batch spanning many session files waits for all their fsyncs, and concurrent fsyncs share
  the filesystem's journal commits (ext4/jbd2 batches them), so they must not queue behind each other.
* A batch is never left half-written by an error: a failed ``write`` is cut back to the batch start.
  Bytes cut by a crash are repaired at the next start (:mod:`.tail_recovery`).
* Files are created lazily with mode 0600 in 0700 directories (R7.2); the directory is fsynced after
  a creation so the new file's name is durable too.

Concurrency: asyncio. One :class:`DurableJsonlFile` belongs to one event loop; the only work done in
other threads is ``fsync`` and the exclusive rewrites of :meth:`DurableJsonlFile.exclusive`, during
which appends are queued in memory (and written, in order, right after).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from agentbus_redis.observability.metrics import observe_fsync
from agentbus_redis.transcript_files.errors import TranscriptFileClosed, TranscriptStoreError, TranscriptSyncFailed
from agentbus_redis.transcript_files.files import ensure_private_dir
from agentbus_redis.transcript_files.filesystem_sync import FilesystemSync
from agentbus_redis.transcript_files.tail_recovery import TornTail, recover_torn_tail

T = TypeVar("T")

DEFAULT_MIN_SYNC_INTERVAL_S = 0.002

FSYNC_THREADS = 64
"""Concurrent fsyncs per process. The default executor (cpu count + 4 threads: 6 here) made a transcript
batch of ~40 session files wait ~7 journal commits (4 ms each on this VM's disk) instead of ~1–2; a
thread blocked in fsync holds no GIL and costs no CPU."""

FSYNC_POOL = ThreadPoolExecutor(max_workers=FSYNC_THREADS, thread_name_prefix="agentbus-fsync")


@dataclass(slots=True)
class _QueuedBatch:
    """A batch appended while the file was in an exclusive rewrite, not yet written."""

    ticket: int
    lines: list[bytes]


@dataclass(slots=True)
class _Waiter:
    ticket: int
    future: asyncio.Future[None]


@dataclass(slots=True)
class AppendStats:
    """Counters for tests and metrics."""

    batches: int = 0
    lines: int = 0
    bytes: int = 0
    fsyncs: int = 0
    torn_tails: list[TornTail] = field(default_factory=list)


def encode_lines(lines: Sequence[str | bytes]) -> list[bytes]:
    """UTF-8 encode lines, refusing embedded newlines (they would split a JSONL record)."""
    encoded: list[bytes] = []
    for index, line in enumerate(lines):
        data = line.encode("utf-8") if isinstance(line, str) else line
        if b"\n" in data or b"\r" in data:
            msg = f"line {index} of the batch contains a raw newline; JSONL lines must be single-line"
            raise ValueError(msg)
        encoded.append(data)
    return encoded


class DurableJsonlFile:
    """One append-only JSONL file with group-committed durability (see the module docstring)."""

    def __init__(
        self,
        path: Path,
        *,
        min_sync_interval_s: float = DEFAULT_MIN_SYNC_INTERVAL_S,
        on_torn_tail: Callable[[TornTail], None] | None = None,
        filesystem_sync: FilesystemSync | None = None,
    ) -> None:
        self.path = path
        self._filesystem_sync = filesystem_sync
        """When set, durability comes from its shared ``syncfs`` rounds instead of an ``fsync`` of this file."""
        self._device = 0
        self.stats = AppendStats()
        self._min_sync_interval_s = min_sync_interval_s
        self._on_torn_tail = on_torn_tail
        self._fd: int | None = None
        self._recovered = False
        self._created = False
        self._closed = False
        self._failure: BaseException | None = None
        self._ticket = 0
        self._written = 0
        self._durable = 0
        self._waiters: deque[_Waiter] = deque()
        self._queued: deque[_QueuedBatch] = deque()
        self._exclusive = False
        self._lock = asyncio.Lock()
        self._sync_task: asyncio.Task[None] | None = None
        self._last_sync_start = 0.0

    # ------------------------------------------------------------------ opening
    def recover(self) -> TornTail | None:
        """Repair a torn tail left by a crash (once; done automatically before the first append)."""
        if self._recovered:
            return None
        self._recovered = True
        torn = recover_torn_tail(self.path)
        if torn is not None:
            self.stats.torn_tails.append(torn)
            if self._on_torn_tail is not None:
                self._on_torn_tail(torn)
        return torn

    @property
    def exists(self) -> bool:
        return self._fd is not None or self.path.exists()

    def _open(self) -> int:
        if self._fd is not None:
            return self._fd
        self.recover()
        ensure_private_dir(self.path.parent)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC
        try:
            self._fd = os.open(self.path, flags)
        except FileNotFoundError:
            self._fd = os.open(self.path, flags | os.O_CREAT | os.O_EXCL, 0o600)
            os.fchmod(self._fd, 0o600)  # the umask filters os.open's mode
            self._created = True
        self._device = os.fstat(self._fd).st_dev
        return self._fd

    # ------------------------------------------------------------------ appending
    def append(self, lines: Sequence[str | bytes]) -> asyncio.Future[None]:
        """Write ``lines`` now (whole, in order) and return a future that resolves when they are durable.

        The write happens before this returns, so later appends land after it whether or not the caller
        awaits; awaiting is only needed to know the bytes survived a crash. An empty batch resolves once
        everything appended before it is durable.
        """
        self._check_usable()
        encoded = encode_lines(lines)
        loop = asyncio.get_running_loop()
        self._ticket += 1
        ticket = self._ticket
        if self._filesystem_sync is not None and not self._exclusive:
            # Shared syncfs rounds: the round itself answers this append, no sync task of this file.
            self._write_batch(encoded)
            self._written = ticket
            if self._fd is None:  # nothing was ever written here: nothing to make durable
                done: asyncio.Future[None] = loop.create_future()
                done.set_result(None)
                return done
            return self._filesystem_sync.request(self._device, self.path.parent, self._sync_failed)
        if self._exclusive:
            self._queued.append(_QueuedBatch(ticket, encoded))
        else:
            self._write_batch(encoded)
            self._written = ticket
        waiter = _Waiter(ticket, loop.create_future())
        self._waiters.append(waiter)
        self._kick()
        return waiter.future

    async def sync(self) -> None:
        """Wait until everything appended so far is durable."""
        if self._fd is None and not self._queued:
            return
        await self.append([])

    def _check_usable(self) -> None:
        if self._failure is not None:
            msg = f"{self.path}: an earlier fsync failed; reopen the file before appending"
            raise TranscriptFileClosed(msg, path=self.path) from self._failure
        if self._closed:
            msg = f"{self.path}: file is closed"
            raise TranscriptFileClosed(msg, path=self.path)

    def _write_batch(self, lines: list[bytes]) -> None:
        if not lines:
            return
        payload = b"".join(line + b"\n" for line in lines)
        fd = self._open()
        start = os.fstat(fd).st_size
        view = memoryview(payload)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as error:
            # Never leave a partial line behind: cut the file back to where this batch began.
            os.ftruncate(fd, start)
            msg = f"{self.path}: append of {len(lines)} line(s) failed: {error}"
            raise TranscriptStoreError(msg, path=self.path) from error
        self.stats.batches += 1
        self.stats.lines += len(lines)
        self.stats.bytes += len(payload)

    # ------------------------------------------------------------------ group commit
    def _kick(self) -> None:
        if self._sync_task is None or self._sync_task.done():
            self._sync_task = asyncio.get_running_loop().create_task(self._sync_loop())

    def _has_unsynced_waiter(self) -> bool:
        # Waiters are in ticket order, so the first one is the oldest.
        return bool(self._waiters) and self._waiters[0].ticket <= self._written

    async def _sync_loop(self) -> None:
        while self._has_unsynced_waiter():
            delay = self._last_sync_start + self._min_sync_interval_s - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            async with self._lock:
                target = self._written
                if target <= self._durable:
                    self._release()
                    continue
                self._last_sync_start = time.monotonic()
                try:
                    if self._filesystem_sync is not None:
                        # Also makes a new file's directory entry durable: syncfs commits the journal.
                        await self._filesystem_sync.sync(self._device, self.path.parent)
                        self.stats.fsyncs += 1
                        self._created = False
                    else:
                        await asyncio.get_running_loop().run_in_executor(FSYNC_POOL, self._fsync)
                except OSError as error:
                    self._poison(error)
                    return
                self._durable = max(self._durable, target)
            self._release()

    def _fsync(self) -> None:
        fd = self._fd
        if fd is None:
            return
        started = time.perf_counter()
        os.fsync(fd)
        observe_fsync(time.perf_counter() - started)
        self.stats.fsyncs += 1
        if self._created:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
            self._created = False

    def _release(self) -> None:
        while self._waiters and self._waiters[0].ticket <= self._durable:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_result(None)

    def _poison(self, error: OSError) -> None:
        """After a failed fsync nothing written since the last good one is known durable."""
        failure = self._sync_failed(error)
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.future.done():
                waiter.future.set_exception(failure)

    def _sync_failed(self, error: OSError) -> TranscriptSyncFailed:
        """Refuse later appends (reopen first) and say what failed."""
        self._failure = error
        return TranscriptSyncFailed(f"{self.path}: fsync failed: {error}", path=self.path)

    # ------------------------------------------------------------------ exclusive rewrites
    async def exclusive(self, operation: Callable[[int], T]) -> T:
        """Run ``operation(fd)`` in a worker thread with no fsync running and appends held back, then
        fsync. Used to cut a line out (R7.13): appends made meanwhile are queued and written after it.

        ``fd`` is open read-write on the file (not in append mode), so the operation can ``pread``,
        ``ftruncate`` and ``pwrite``.
        """
        self._check_usable()
        self._open()
        async with self._lock:
            self._exclusive = True
            try:
                result = await asyncio.to_thread(self._run_exclusive, operation)
                self._durable = max(self._durable, self._written)
            finally:
                self._exclusive = False
                self._write_queued()
                self._release()
                self._kick()
        return result

    def _run_exclusive(self, operation: Callable[[int], T]) -> T:
        fd = os.open(self.path, os.O_RDWR | os.O_CLOEXEC)
        try:
            result = operation(fd)
            os.fsync(fd)
            self.stats.fsyncs += 1
        finally:
            os.close(fd)
        return result

    def _write_queued(self) -> None:
        while self._queued:
            batch = self._queued.popleft()
            try:
                self._write_batch(batch.lines)
            except TranscriptStoreError as error:
                self._fail_ticket(batch.ticket, error)
                continue
            self._written = batch.ticket

    def _fail_ticket(self, ticket: int, error: BaseException) -> None:
        for waiter in list(self._waiters):
            if waiter.ticket == ticket:
                self._waiters.remove(waiter)
                if not waiter.future.done():
                    waiter.future.set_exception(error)

    def drop_queued_line(self, matches: Callable[[bytes], bool]) -> bool:
        """Remove the newest not-yet-written line for which ``matches`` is true (R7.13 [OBS] fix: a
        tombstone must also catch a line still waiting in the queue). True when one was dropped."""
        for batch in reversed(self._queued):
            for index in range(len(batch.lines) - 1, -1, -1):
                if matches(batch.lines[index]):
                    del batch.lines[index]
                    return True
        return False

    # ------------------------------------------------------------------ closing
    async def close(self) -> None:
        """Make everything durable, then close the descriptor. Later appends raise."""
        if self._closed:
            return
        if self._failure is None:
            await self.sync()
        if self._sync_task is not None:
            await asyncio.gather(self._sync_task, return_exceptions=True)
        self._closed = True
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
