"""Errors of the transcript service (file I/O on top of the pure library).

AgentbusError (agentbus_redis.errors)
└── TranscriptStoreError        a transcript file could not be written or read (``.path``)
    ├── TranscriptFileClosed     an append after :meth:`DurableJsonlFile.close`
    ├── TranscriptSyncFailed     fsync failed: bytes since the last good sync may be lost
    └── TranscriptSessionBusy    another writer kept the session locked past the timeout
"""

from __future__ import annotations

from pathlib import Path

from agentbus_redis.errors import AgentbusError


class TranscriptStoreError(AgentbusError):
    """A transcript file operation failed; ``path`` names the file."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(message)
        self.path = path


class TranscriptFileClosed(TranscriptStoreError):
    """The file was closed (or poisoned by a failed fsync) and takes no more appends."""


class TranscriptSyncFailed(TranscriptStoreError):
    """``fsync`` failed. The kernel may have dropped the dirty pages, so lines acknowledged by no sync
    are not known to be on disk; the file refuses further appends until it is reopened."""


class TranscriptSessionBusy(TranscriptStoreError):
    """Another writer (a previous owner of the session's shard) held the session's lock for longer than
    the store waits; ``path`` is the lock file. The batch is retried later."""
