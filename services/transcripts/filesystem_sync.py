"""One ``syncfs`` for every transcript file of a batch, instead of one ``fsync`` per file.

A transcript batch touches one file per session (R7.1), and an ``fsync`` costs ~45 µs of kernel CPU and
a journal commit per file on this VM's ext4, whatever the file holds: with one line per session per
batch that was most of the transcript worker's CPU. ``syncfs(2)`` commits the filesystem once for every
file on it (measured: 3 µs of CPU per file appended, and 0.4 ms instead of 5.5 ms for 40 files).

Group commit: a caller asks *after* it wrote; it is answered by a ``syncfs`` that starts after its
request. Requests made while one runs share the next one, and every request of one event-loop turn
shares one (a batch writes all its sessions' files, then they all ask).

Errors: ``syncfs`` reports a writeback error of the filesystem once per open file description, since
Linux 5.8 (before that it returned 0 on errors, which is why older kernels keep per-file ``fsync``). The
call is made on a descriptor of the filesystem opened when this object first syncs it, so an error
after that is reported to the round that sees it, and every request of that round fails.

What it costs: a ``syncfs`` also writes back other processes' dirty pages on the same filesystem, so a
data directory should sit on a volume of its own; ``AGENTBUS_TRANSCRIPT_SYNC=fsync`` keeps per-file
``fsync``.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import platform
import time
from collections.abc import Callable
from concurrent.futures import Executor
from pathlib import Path

from services.observability.metrics import observe_fsync

MIN_KERNEL = (5, 8)
"""The first Linux whose ``syncfs`` reports writeback errors."""


def _load_syncfs() -> Callable[[int], int] | None:
    if platform.system() != "Linux":
        return None
    release = platform.release().split("-", 1)[0].split(".")
    try:
        version = (int(release[0]), int(release[1]))
    except (IndexError, ValueError):
        return None
    if version < MIN_KERNEL:
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        function: Callable[[int], int] = libc.syncfs
    except (OSError, AttributeError):
        return None
    return function


_syncfs = _load_syncfs()


def syncfs_supported() -> bool:
    """Whether this system has a ``syncfs`` that reports errors (Linux ≥ 5.8 with a libc exposing it)."""
    return _syncfs is not None


def _syncfs_or_raise(fd: int) -> None:
    assert _syncfs is not None  # FilesystemSync refuses to start without it
    started = time.perf_counter()
    if _syncfs(fd) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"syncfs: {os.strerror(error)}")
    observe_fsync(time.perf_counter() - started)


class FilesystemSync:
    """Group-committed ``syncfs`` per filesystem (see the module docstring). One per event loop."""

    def __init__(self, executor: Executor) -> None:
        if _syncfs is None:
            msg = f"syncfs with error reporting needs Linux >= {MIN_KERNEL[0]}.{MIN_KERNEL[1]}"
            raise RuntimeError(msg)
        self._executor = executor
        self._filesystems: dict[int, _Filesystem] = {}
        self.syncs = 0

    async def sync(self, device: int, directory: Path) -> None:
        """Return once a ``syncfs`` of filesystem ``device`` (``st_dev``; ``directory`` is on it) that started
        after this call has finished (raises ``OSError`` when it failed)."""
        filesystem = self._filesystems.get(device)
        if filesystem is None:
            filesystem = self._filesystems[device] = _Filesystem(os.open(directory, os.O_RDONLY | os.O_CLOEXEC))
        await filesystem.request(self)

    def close(self) -> None:
        for filesystem in self._filesystems.values():
            os.close(filesystem.fd)
        self._filesystems.clear()

    async def _run(self, fd: int) -> None:
        await asyncio.get_running_loop().run_in_executor(self._executor, _syncfs_or_raise, fd)
        self.syncs += 1


class _Filesystem:
    """The rounds of one filesystem: at most one ``syncfs`` running, and the requests for the next one."""

    __slots__ = ("fd", "next_round", "running")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.running = False
        self.next_round: asyncio.Future[None] | None = None

    async def request(self, owner: FilesystemSync) -> None:
        if self.next_round is None:
            self.next_round = asyncio.get_running_loop().create_future()
            if not self.running:
                # Started on the next loop turn: the other files of this batch join the same round.
                asyncio.get_running_loop().call_soon(self._start, owner)
        await asyncio.shield(self.next_round)

    def _start(self, owner: FilesystemSync) -> None:
        if self.running or self.next_round is None:
            return
        self.running = True
        current, self.next_round = self.next_round, None
        task = asyncio.get_running_loop().create_task(owner._run(self.fd))
        task.add_done_callback(lambda done: self._finished(owner, current, done))

    def _finished(self, owner: FilesystemSync, current: asyncio.Future[None], done: asyncio.Task[None]) -> None:
        self.running = False
        if done.cancelled():
            current.cancel()
        elif (error := done.exception()) is not None:
            current.set_exception(error)
        else:
            current.set_result(None)
        if self.next_round is not None:
            self._start(owner)
