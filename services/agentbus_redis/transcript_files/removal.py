"""Cutting one message line out of a transcript file (R7.13 ``removeMessageByUuid``, tombstones R6.3).

1. Tail window: read the last 64 KiB, find the last ``"uuid":"<target>"`` (the leading quote means a
   ``parentUuid`` match is never hit), check that the whole line lies inside the window and that its
   parsed top-level ``uuid`` really is the target, then cut that line out.
2. Fallback: if that fails and the file is at most 50 MiB, read it whole and drop every line whose parsed
   ``uuid`` equals the target. Larger files are left alone (``too_large``).

Crash safety: Claude Code truncates first and re-appends the following bytes, so a crash in between
loses every line after the removed one. Here the following bytes are first written over the removed
line (``pwrite``) and the file is shortened afterwards: a crash in between leaves a duplicated
fragment at the end (reported as a malformed line by the reader), never a lost line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Literal

TAIL_WINDOW_BYTES = 64 * 1024
MAX_REWRITE_BYTES = 50 * 1024 * 1024

RemovalOutcome = Literal["queued", "buffered", "tail", "rewrite", "not_found", "too_large", "no_file"]
"""Where the line was found: still in the write queue, in the unmaterialized buffer (R7.2), in the
tail window, by the full rewrite; or why nothing was removed."""


@dataclass(frozen=True, slots=True)
class RemovalResult:
    """What :func:`remove_line_by_uuid` (or the store) did."""

    uuid: str
    outcome: RemovalOutcome
    removed_bytes: int = 0

    @property
    def removed(self) -> bool:
        return self.outcome in {"queued", "buffered", "tail", "rewrite"}


def uuid_needle(uuid: str) -> bytes:
    """The byte pattern R7.13 searches for (compact JSON as written by the store and Claude Code)."""
    return b'"uuid":' + json.dumps(uuid, ensure_ascii=False).encode("utf-8")


def line_has_uuid(line: bytes, uuid: str) -> bool:
    """True when ``line`` parses to an object whose top-level ``uuid`` is ``uuid``."""
    try:
        value = json.loads(line)
    except ValueError:
        return False
    return isinstance(value, dict) and value.get("uuid") == uuid


def _replace_range(fd: int, start: int, end: int, replacement: bytes, size: int) -> None:
    """Replace bytes ``[start, end)`` of the file with ``replacement`` + everything after ``end``."""
    rest = replacement + os.pread(fd, size - end, end)
    view = memoryview(rest)
    offset = start
    while view:
        written = os.pwrite(fd, view, offset)
        view = view[written:]
        offset += written
    os.ftruncate(fd, start + len(rest))


def _remove_in_tail(fd: int, size: int, uuid: str, window: int) -> int | None:
    """Bytes removed by the tail-window pass, or ``None`` when it must fall back."""
    window_start = max(0, size - window)
    data = os.pread(fd, size - window_start, window_start)
    needle = uuid_needle(uuid)
    found = data.rfind(needle)
    if found < 0:
        return None
    newline_before = data.rfind(b"\n", 0, found)
    if newline_before < 0 and window_start > 0:
        return None  # the line starts before the window
    line_start = newline_before + 1
    newline_after = data.find(b"\n", found)
    line_end = len(data) if newline_after < 0 else newline_after + 1
    if not line_has_uuid(data[line_start:line_end], uuid):
        return None
    _replace_range(fd, window_start + line_start, window_start + line_end, b"", size)
    return line_end - line_start


def _remove_by_rewrite(fd: int, size: int, uuid: str) -> int:
    """Bytes removed by the full pass (0 when no line has that uuid)."""
    data = os.pread(fd, size, 0)
    needle = uuid_needle(uuid)
    kept: list[bytes] = []
    first_removed: int | None = None
    removed = 0
    offset = 0
    for line in data.splitlines(keepends=True):
        if needle in line and line_has_uuid(line.strip(), uuid):
            if first_removed is None:
                first_removed = offset
            removed += len(line)
        elif first_removed is not None:
            kept.append(line)
        offset += len(line)
    if first_removed is None:
        return 0
    _replace_range(fd, first_removed, size, b"".join(kept), size)
    return removed


def remove_line_by_uuid(
    fd: int,
    uuid: str,
    *,
    tail_window_bytes: int = TAIL_WINDOW_BYTES,
    max_rewrite_bytes: int = MAX_REWRITE_BYTES,
) -> RemovalResult:
    """R7.13 on an open read-write descriptor (the caller holds the file exclusively and fsyncs)."""
    size = os.fstat(fd).st_size
    removed = _remove_in_tail(fd, size, uuid, tail_window_bytes)
    if removed is not None:
        return RemovalResult(uuid, "tail", removed)
    if size > max_rewrite_bytes:
        return RemovalResult(uuid, "too_large")
    removed = _remove_by_rewrite(fd, size, uuid)
    return RemovalResult(uuid, "rewrite", removed) if removed else RemovalResult(uuid, "not_found")
