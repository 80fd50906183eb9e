"""Shared ``syncfs`` rounds for transcript files (``transcript_files/filesystem_sync.py``, R7.2 durability)."""

from __future__ import annotations

import asyncio
import ctypes
import errno
import os
import threading
from pathlib import Path

import pytest

from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.transcript_files import filesystem_sync
from agentbus_redis.transcript_files.errors import TranscriptFileClosed, TranscriptSyncFailed
from agentbus_redis.transcript_files.filesystem_sync import FilesystemSync, syncfs_supported
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.transcript_files.writer import FSYNC_POOL, DurableJsonlFile

pytestmark = pytest.mark.skipif(not syncfs_supported(), reason="syncfs reports errors only on Linux >= 5.8")


def _device(path: Path) -> int:
    return os.stat(path).st_dev


async def test_requests_of_one_loop_turn_share_one_syncfs(tmp_path: Path) -> None:
    sync = FilesystemSync(FSYNC_POOL)
    await asyncio.gather(*(sync.sync(_device(tmp_path), tmp_path) for _ in range(40)))
    assert sync.syncs == 1
    sync.close()


async def test_a_request_made_during_a_round_waits_for_the_next_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The round running when a file asks may have started before the file's write: it does not count."""
    release = threading.Event()
    real = filesystem_sync._syncfs_or_raise
    calls: list[int] = []

    def held_syncfs(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 1:
            release.wait(5)
        real(fd)

    monkeypatch.setattr(filesystem_sync, "_syncfs_or_raise", held_syncfs)
    sync = FilesystemSync(FSYNC_POOL)
    first = asyncio.ensure_future(sync.sync(_device(tmp_path), tmp_path))
    while not calls:  # the first round is running (held)
        await asyncio.sleep(0.001)
    second = asyncio.ensure_future(sync.sync(_device(tmp_path), tmp_path))
    await asyncio.sleep(0.01)
    release.set()
    await first
    assert not second.done()
    await second
    assert (sync.syncs, len(calls)) == (2, 2)
    sync.close()


async def test_a_cancelled_request_leaves_the_others_of_its_round_waiting(tmp_path: Path) -> None:
    """Each request has a future of its own (no shared future a cancelled caller could cancel for all)."""
    sync = FilesystemSync(FSYNC_POOL)
    first = sync.request(_device(tmp_path), tmp_path)
    second = sync.request(_device(tmp_path), tmp_path)
    first.cancel()
    await second
    assert (first.cancelled(), sync.syncs) == (True, 1)
    sync.close()


async def test_appends_of_many_files_are_answered_by_one_round(tmp_path: Path) -> None:
    """R7.2: an append's future resolves after a syncfs that started after its write; files written in one
    loop turn share it."""
    sync = FilesystemSync(FSYNC_POOL)
    files = [DurableJsonlFile(tmp_path / f"s{number}.jsonl", filesystem_sync=sync) for number in range(10)]
    await asyncio.gather(*(file.append(['{"n":1}']) for file in files))
    await asyncio.gather(*(file.append(['{"n":2}']) for file in files))
    assert sync.syncs == 2
    assert all(file.path.read_text() == '{"n":1}\n{"n":2}\n' for file in files)
    await asyncio.gather(*(file.close() for file in files))
    sync.close()


async def test_a_failed_syncfs_fails_every_file_of_its_round(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A write error reported by syncfs poisons every file that waited on that round (nothing is
    acknowledged as durable that may not be)."""

    def failing_syncfs(fd: int) -> int:
        ctypes.set_errno(errno.EIO)
        return -1

    monkeypatch.setattr(filesystem_sync, "_syncfs", failing_syncfs)
    sync = FilesystemSync(FSYNC_POOL)
    files = [DurableJsonlFile(tmp_path / f"s{number}.jsonl", filesystem_sync=sync) for number in range(3)]
    results = await asyncio.gather(*(file.append(['{"n":1}']) for file in files), return_exceptions=True)
    assert all(isinstance(result, TranscriptSyncFailed) for result in results)
    assert sync.syncs == 0
    with pytest.raises(TranscriptFileClosed, match="earlier fsync failed"):
        files[0].append(['{"n":2}'])
    sync.close()


async def test_a_store_batch_over_many_sessions_takes_one_syncfs(tmp_path: Path) -> None:
    """R7.2: every record call returns once its lines are durable; a batch of 20 sessions written together
    shares one syncfs instead of 20 fsyncs."""
    store = TranscriptStore(tmp_path, StoreConfig(sync="syncfs"))
    sessions = [f"session-{number}" for number in range(20)]
    await asyncio.gather(*(store.record(s, [create_user_message("open")], cwd="/w") for s in sessions))
    sync = store._filesystem_sync
    assert sync is not None
    before = sync.syncs
    results = await asyncio.gather(*(store.record(s, [create_user_message("next")], cwd="/w") for s in sessions))
    assert sync.syncs - before == 1
    assert all(result.durable for result in results)
    for result in results:
        assert result.path.read_text().count("\n") == 2
    await store.close()


async def test_fsync_mode_keeps_one_fsync_per_file(tmp_path: Path) -> None:
    store = TranscriptStore(tmp_path, StoreConfig(sync="fsync"))
    result = await store.record("s", [create_user_message("hi")], cwd="/w")
    assert store._filesystem_sync is None
    assert result.path.read_text().count("\n") == 1
    await store.close()
