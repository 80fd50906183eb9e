"""Start-up repair of a JSONL file whose last line was cut by a crash.

Every batch is appended as whole ``\\n``-terminated lines, so bytes after the last ``\\n`` can only be a
write that a crash (or a full disk) interrupted; no caller was told they were durable. They are never
silently dropped: they are first appended to a ``<file>.torn`` sidecar (fsynced), then cut from the
transcript, and reported (:func:`report_torn_tail`: a structured log line and the
``agentbus_transcript_torn_tails_total`` counter). A tail that is a complete JSON value (a hand-edited
file without a final newline) is kept and just terminated.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import structlog

from agentbus_redis.observability import metrics

log = structlog.get_logger(__name__)

_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class TornTail:
    """What start-up found after the last newline of ``path`` and what it did about it."""

    path: Path
    offset: int
    """Byte offset of the first byte after the last ``\\n`` (where the file was cut)."""
    data: bytes
    action: Literal["truncated", "terminated"]
    """``truncated``: the bytes were moved to ``saved_to``; ``terminated``: a ``\\n`` was appended."""
    saved_to: Path | None

    def describe(self) -> str:
        if self.action == "terminated":
            return f"{self.path}: last line had no newline at byte {self.offset}; newline added"
        return (
            f"{self.path}: torn last line ({len(self.data)} bytes at byte {self.offset}) "
            f"moved to {self.saved_to} and cut from the transcript"
        )


def torn_sidecar(path: Path) -> Path:
    """``<file>.torn``: where cut tails are kept."""
    return path.with_name(path.name + ".torn")


def _last_newline_end(fd: int, size: int) -> int:
    """Offset just after the last ``\\n`` in the file (0 when there is none)."""
    end = size
    while end > 0:
        start = max(0, end - _CHUNK)
        chunk = os.pread(fd, end - start, start)
        index = chunk.rfind(b"\n")
        if index >= 0:
            return start + index + 1
        end = start
    return 0


def _is_complete_json(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return False
    return True


def _save_sidecar(path: Path, data: bytes) -> Path:
    sidecar = torn_sidecar(path)
    fd = os.open(sidecar, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # One fragment per sidecar line, so several recoveries stay separable.
        os.write(fd, data + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return sidecar


def recover_torn_tail(path: Path) -> TornTail | None:
    """Make ``path`` end on a line boundary (see the module docstring). ``None`` when it already does
    (or does not exist)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        boundary = _last_newline_end(fd, size)
        if boundary == size:
            return None
        data = os.pread(fd, size - boundary, boundary)
        if data.strip() and _is_complete_json(data.strip()):
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"\n")
            os.fsync(fd)
            return TornTail(path=path, offset=boundary, data=data, action="terminated", saved_to=None)
        saved_to = _save_sidecar(path, data)
        os.ftruncate(fd, boundary)
        os.fsync(fd)
        return TornTail(path=path, offset=boundary, data=data, action="truncated", saved_to=saved_to)
    finally:
        os.close(fd)


def report_torn_tail(torn: TornTail, *, session_id: str | None) -> None:
    """Log what start-up repair did to ``session_id``'s file (a warning when bytes were cut: they were
    a write nobody was told was durable) and count it."""
    saved_to = str(torn.saved_to) if torn.saved_to is not None else None
    report = log.warning if torn.action == "truncated" else log.info
    report(
        "transcript_torn_tail",
        session_id=session_id,
        action=torn.action,
        bytes=len(torn.data),
        offset=torn.offset,
        path=str(torn.path),
        saved_to=saved_to,
    )
    metrics.record_torn_tail(torn.action, len(torn.data))
