"""Whole-file writes: a new file appears complete or not at all (temp file + fsync + rename)."""

from __future__ import annotations

import os
from pathlib import Path


def ensure_private_dir(directory: Path) -> None:
    """R7.2: create missing directories with mode 0700 (existing ones are left as they are)."""
    missing: list[Path] = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            continue
        # mkdir's mode is filtered by the umask; chmod makes it exact.
        os.chmod(path, 0o700)


def write_file_atomically(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` via a temporary sibling, fsync it, rename it over ``path`` and fsync the
    directory. Missing directories are created 0700 (R7.2)."""
    ensure_private_dir(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        temporary.unlink(missing_ok=True)
        raise
    os.close(fd)
    os.replace(temporary, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
