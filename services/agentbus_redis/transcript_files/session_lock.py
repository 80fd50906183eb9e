"""One writer per session file: an exclusive ``flock`` held while a store has the session open.

Why: the transcripts lane has one owner per shard, but an owner paused past its lease (GC, CPU
starvation, SIGSTOP) may wake up and append the batch it held while the next owner already writes the
same sessions. Redis refuses the stale owner's ack (the lease-epoch fence), but a file append is not a
Redis write. With the lock, the next owner opens a session only once the previous holder has let it go
(it does when it notices the lost lease and forgets the shard's sessions), and it reads the file *after*
taking the lock — so its de-dup uuids and chain tail include every line the old owner wrote: exactly once
per uuid, parents intact.

Lock files live under ``<root>/.agentbus-locks/`` (not in ``projects/``, which is Claude Code's layout),
one empty file per session, never deleted (deleting a lock file races with a process locking it).
``flock`` locks belong to the open file description, so two stores in one process exclude each other as
two processes do; over NFS, Linux maps ``flock`` to byte-range locks (NFSv4 locking must work there).
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from agentbus_redis.session_ids import check_session_id
from agentbus_redis.transcript_files.errors import TranscriptSessionBusy

LOCKS_DIR = ".agentbus-locks"

DEFAULT_LOCK_TIMEOUT_S = 30.0
"""How long opening a session waits for another writer to let it go. A previous shard owner lets go
within one lease renewal interval of waking up (a third of the lease TTL, 10 s by default)."""


def session_lock_path(root: Path, session_id: str) -> Path:
    """``<root>/.agentbus-locks/<session id>.lock``; an id outside the grammar raises
    :class:`agentbus_redis.session_ids.InvalidSessionId` before anything is created (it would name a path
    outside the locks directory)."""
    return root / LOCKS_DIR / f"{check_session_id(session_id)}.lock"


class SessionLock:
    """An exclusive advisory lock on one session (see the module docstring). Blocking: call it from a
    worker thread."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(
        cls, root: Path, session_id: str, *, timeout_s: float = DEFAULT_LOCK_TIMEOUT_S, poll_s: float = 0.02
    ) -> SessionLock:
        """Take the lock, waiting up to ``timeout_s``; raises :class:`TranscriptSessionBusy` after that."""
        path = session_lock_path(root, session_id)
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    msg = f"session {session_id}: another writer holds {path} (waited {timeout_s:g} s)"
                    raise TranscriptSessionBusy(msg, path=path) from None
                time.sleep(poll_s)
            else:
                return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let the session go (closing the descriptor drops the lock); idempotent."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
