"""File walking shared by Glob and Grep: inside the workspace, ``.git`` skipped, links not followed."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

from agentbus_redis.tools.tool import ToolError
from agentbus_redis.workers.tools.workspace import Workspace

SKIPPED_DIRECTORIES = frozenset({".git"})


def search_root(workspace: Workspace, raw: str | None) -> Path:
    """The directory (or file) a search starts at; the workspace root when ``raw`` is empty."""
    root = workspace.resolve(raw) if raw else workspace.root
    if not root.exists():
        raise ToolError(f"Path does not exist: {raw}. Note: your current working directory is {workspace.root}.")
    return root


def _searchable(path: Path, workspace: Workspace) -> bool:
    """A regular file whose real location is inside the workspace: a symlink pointing outside is
    never read, and FIFOs, sockets and devices (which could block a read forever) are skipped."""
    try:
        real = path.resolve(strict=True)
        return workspace.contains(real) and stat.S_ISREG(real.stat().st_mode)
    except (OSError, RuntimeError):
        return False


def walk_files(workspace: Workspace, root: Path) -> Iterator[tuple[Path, str]]:
    """``(path, path relative to root in POSIX form)`` for every searchable file under ``root`` (see
    :func:`_searchable`), in a stable order; symlinked directories are not entered, ``.git`` is
    skipped."""
    if not root.is_dir():
        if _searchable(root, workspace):
            yield root, root.name
        return
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        subdirectories[:] = sorted(name for name in subdirectories if name not in SKIPPED_DIRECTORIES)
        base = Path(directory)
        relative_base = base.relative_to(root).as_posix()
        for name in sorted(files):
            if _searchable(base / name, workspace):
                yield base / name, name if relative_base == "." else f"{relative_base}/{name}"


def modified_time(path: Path) -> float:
    """mtime without following symlinks (0 when the file vanished)."""
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0
