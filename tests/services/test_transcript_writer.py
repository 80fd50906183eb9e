"""The durable appender: whole lines, group commit, torn-tail recovery, exclusive rewrites."""

from __future__ import annotations

import asyncio
import json
import os
import stat
from pathlib import Path

import pytest

from agentbus_redis.transcript_files.errors import TranscriptFileClosed
from agentbus_redis.transcript_files.tail_recovery import TornTail, recover_torn_tail, torn_sidecar
from agentbus_redis.transcript_files.writer import DurableJsonlFile


def _line(n: int) -> str:
    return json.dumps({"type": "user", "uuid": f"u{n}", "n": n}, separators=(",", ":"))


async def test_append_resolves_after_lines_are_written_whole(tmp_path: Path) -> None:
    file = DurableJsonlFile(tmp_path / "s.jsonl")
    await file.append([_line(1), _line(2)])
    assert (tmp_path / "s.jsonl").read_text() == f"{_line(1)}\n{_line(2)}\n"
    assert file.stats.fsyncs >= 1
    await file.close()


async def test_r7_2_file_is_created_lazily_0600_in_0700_dirs(tmp_path: Path) -> None:
    path = tmp_path / "projects" / "p" / "s.jsonl"
    file = DurableJsonlFile(path)
    assert not path.exists()  # nothing until the first append
    await file.append([_line(1)])
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    await file.close()


async def test_group_commit_shares_fsyncs_between_concurrent_batches(tmp_path: Path) -> None:
    """No fsync per line or per batch: 200 concurrent single-line batches need far fewer fsyncs."""
    file = DurableJsonlFile(tmp_path / "s.jsonl", min_sync_interval_s=0.005)
    futures = [file.append([_line(n)]) for n in range(200)]
    await asyncio.gather(*futures)
    lines = (tmp_path / "s.jsonl").read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == list(range(200))
    assert file.stats.batches == 200
    assert file.stats.fsyncs < 20
    await file.close()


async def test_write_happens_at_append_time_in_call_order(tmp_path: Path) -> None:
    file = DurableJsonlFile(tmp_path / "s.jsonl")
    first = file.append([_line(1)])
    second = file.append([_line(2)])
    # Both are already in the file (page cache) before anything is awaited.
    assert (tmp_path / "s.jsonl").read_text().splitlines() == [_line(1), _line(2)]
    await asyncio.gather(first, second)
    await file.close()


async def test_raw_newline_in_a_line_is_refused(tmp_path: Path) -> None:
    file = DurableJsonlFile(tmp_path / "s.jsonl")
    with pytest.raises(ValueError, match="raw newline"):
        file.append(['{"a":1}\n{"b":2}'])
    assert not (tmp_path / "s.jsonl").exists()
    await file.close()


async def test_append_after_close_raises(tmp_path: Path) -> None:
    file = DurableJsonlFile(tmp_path / "s.jsonl")
    await file.append([_line(1)])
    await file.close()
    with pytest.raises(TranscriptFileClosed):
        file.append([_line(2)])


async def test_torn_tail_is_saved_to_sidecar_reported_and_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(f"{_line(1)}\n{_line(2)}\n".encode() + b'{"type":"user","uu')
    reported: list[TornTail] = []
    file = DurableJsonlFile(path, on_torn_tail=reported.append)
    await file.append([_line(3)])
    assert path.read_text().splitlines() == [_line(1), _line(2), _line(3)]
    assert len(reported) == 1
    assert reported[0].action == "truncated"
    assert reported[0].data == b'{"type":"user","uu'
    assert torn_sidecar(path).read_bytes() == b'{"type":"user","uu\n'
    assert stat.S_IMODE(torn_sidecar(path).stat().st_mode) == 0o600
    await file.close()


def test_complete_last_line_without_newline_is_terminated_not_cut(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(f"{_line(1)}\n{_line(2)}")
    torn = recover_torn_tail(path)
    assert torn is not None
    assert torn.action == "terminated"
    assert path.read_text() == f"{_line(1)}\n{_line(2)}\n"
    assert not torn_sidecar(path).exists()


def test_clean_file_and_missing_file_need_no_recovery(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    assert recover_torn_tail(path) is None
    path.write_text(f"{_line(1)}\n")
    assert recover_torn_tail(path) is None


def test_torn_line_longer_than_the_read_chunk_is_found(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    torn = b'{"type":"user","text":"' + b"x" * 200_000
    path.write_bytes(f"{_line(1)}\n".encode() + torn)
    result = recover_torn_tail(path)
    assert result is not None
    assert result.offset == len(_line(1)) + 1
    assert path.read_text() == f"{_line(1)}\n"


async def test_exclusive_holds_back_appends_and_writes_them_after(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file = DurableJsonlFile(path)
    await file.append([_line(1), _line(2)])
    started = asyncio.Event()
    release = asyncio.Event()
    loop = asyncio.get_running_loop()

    def rewrite(fd: int) -> int:
        loop.call_soon_threadsafe(started.set)
        asyncio.run_coroutine_threadsafe(release.wait(), loop).result()
        size = os.fstat(fd).st_size
        os.ftruncate(fd, size - len(_line(2)) - 1)  # drop the last line
        return size

    task = asyncio.create_task(file.exclusive(rewrite))
    await started.wait()
    queued = file.append([_line(3)])
    assert path.read_text().splitlines() == [_line(1), _line(2)]  # held back meanwhile
    release.set()
    await task
    await queued
    assert path.read_text().splitlines() == [_line(1), _line(3)]
    await file.close()


async def test_drop_queued_line_removes_a_line_not_yet_written(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    file = DurableJsonlFile(path)
    await file.append([_line(1)])
    gate = asyncio.Event()
    loop = asyncio.get_running_loop()

    def wait(fd: int) -> None:
        asyncio.run_coroutine_threadsafe(gate.wait(), loop).result()
        del fd

    task = asyncio.create_task(file.exclusive(wait))
    await asyncio.sleep(0.01)
    queued = file.append([_line(2), _line(3)])
    assert file.drop_queued_line(lambda line: b'"uuid":"u2"' in line)
    assert not file.drop_queued_line(lambda line: b'"uuid":"u9"' in line)
    gate.set()
    await task
    await queued
    assert path.read_text().splitlines() == [_line(1), _line(3)]
    await file.close()
