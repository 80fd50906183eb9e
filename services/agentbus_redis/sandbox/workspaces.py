"""The workspace of each session under the tools root (scope rules: ``confinement/workspaces.py``).

A session's directory is made on its first tool call (mode 0700, owned by the user its sandboxed commands
run as) and removed by :meth:`SessionWorkspaces.remove_idle` once nothing in it changed for the retention
period. A session id becomes a path only after it passed the session-id grammar.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import structlog

from agentbus_redis.confinement.workspaces import SESSIONS_DIR, WorkspaceScope, workspace_relative_dir

log = structlog.get_logger(__name__)
CHECK_DIR = ".sandbox-check"
SERVERS_DIR = ".mcp-servers"
"""Under the tools root: one directory per sandboxed MCP server, the only one its shared connection may write."""


class SessionWorkspaces:
    """Finds (and makes) the workspace a session's tools work in."""

    def __init__(
        self,
        root: Path,
        scope: WorkspaceScope,
        *,
        owner: tuple[int, int] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root.resolve(strict=True)
        self.scope: WorkspaceScope = scope
        self.owner = owner
        """(uid, gid) given each new workspace: the user sandboxed commands run as (None: the worker's)."""
        self.clock = clock
        if scope == "shared" and owner is not None:  # every session's commands write in the root itself
            os.chown(self.root, *owner)

    def check_dir(self) -> Path:
        """A directory of no session for the worker's sandbox check (``sessions/`` holds only session ids)."""
        directory = self.root / CHECK_DIR
        directory.mkdir(mode=0o700, exist_ok=True)
        if self.owner is not None:
            os.chown(directory, *self.owner)
        return directory

    def server_dir(self, name: str) -> Path:
        """The directory of the sandboxed MCP server ``name`` (a ``.mcp.json`` server name: one path component)
        for its connection every session shares: outside ``sessions/``, so no session's workspace is in it."""
        if not name or "/" in name or name in (".", ".."):
            raise ValueError(f"not an MCP server name: {name!r}")
        return self._owned_dir(self.root / SERVERS_DIR / name)

    def for_session(self, session_id: str) -> Path:
        """The workspace directory of ``session_id`` (made if missing). Raises ``InvalidSessionId`` for a bad id."""
        relative = workspace_relative_dir(session_id, self.scope)
        if not relative:
            return self.root
        return self._owned_dir(self.root / relative)

    def _owned_dir(self, directory: Path) -> Path:
        """``directory`` made if missing: its parent passable (0711), itself private (0700) to the sandbox's user."""
        if not directory.is_dir():
            directory.parent.mkdir(mode=0o711, exist_ok=True)
            directory.mkdir(mode=0o700, exist_ok=True)
            if self.owner is not None:
                os.chown(directory, *self.owner)
        return directory

    def remove_idle(self, retention_s: float) -> list[str]:
        """Remove the session workspaces whose newest change is older than ``retention_s``; returns their names."""
        sessions = self.root / SESSIONS_DIR
        if self.scope == "shared" or not sessions.is_dir():
            return []
        cutoff = self.clock() - retention_s
        removed: list[str] = []
        for directory in sessions.iterdir():
            if directory.is_symlink() or not directory.is_dir() or _newest_change(directory) >= cutoff:
                continue
            shutil.rmtree(directory, ignore_errors=True)
            removed.append(directory.name)
        if removed:
            log.info("workspaces_removed", count=len(removed), retention_s=retention_s)
        return removed


def _newest_change(directory: Path) -> float:
    """The latest mtime of ``directory`` and anything below it (symlinks not followed)."""
    newest = directory.lstat().st_mtime
    for parent, dirs, files in os.walk(directory, followlinks=False):
        for name in (*dirs, *files):
            try:
                newest = max(newest, os.lstat(os.path.join(parent, name)).st_mtime)
            except OSError:
                continue
    return newest
