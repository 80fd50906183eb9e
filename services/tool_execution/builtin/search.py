"""File walking shared by Glob and Grep: inside the workspace, ``.git`` skipped, links not followed."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from services.tool_execution.tool import ToolError
from services.tool_execution.workspace import Workspace

SKIPPED_DIRECTORIES = frozenset({".git"})


def search_root(workspace: Workspace, raw: str | None) -> Path:
    """The directory (or file) a search starts at; the workspace root when ``raw`` is empty."""
    root = workspace.resolve(raw) if raw else workspace.root
    if not root.exists():
        raise ToolError(f"Path does not exist: {raw}. Note: your current working directory is {workspace.root}.")
    return root


def walk_files(root: Path) -> Iterator[tuple[Path, str]]:
    """``(path, path relative to root in POSIX form)`` for every regular file (or link to one) under
    ``root``, in a stable order; symlinked directories are not entered, ``.git`` is skipped."""
    if root.is_file():
        yield root, root.name
        return
    for directory, subdirectories, files in os.walk(root, followlinks=False):
        subdirectories[:] = sorted(name for name in subdirectories if name not in SKIPPED_DIRECTORIES)
        base = Path(directory)
        relative_base = base.relative_to(root).as_posix()
        for name in sorted(files):
            relative = name if relative_base == "." else f"{relative_base}/{name}"
            yield base / name, relative


def modified_time(path: Path) -> float:
    """mtime without following symlinks (0 when the file vanished)."""
    try:
        return path.lstat().st_mtime
    except OSError:
        return 0.0
