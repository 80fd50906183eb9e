"""Confinement of file tools to one workspace directory."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from agentbus_redis.tools.tool import ToolError


class PathOutsideWorkspace(ToolError):
    """A path that resolves (symlinks followed) outside the workspace root."""

    def __init__(self, raw: str, resolved: Path, root: Path) -> None:
        self.raw = raw
        self.resolved = resolved
        self.root = root
        super().__init__(
            f"Path {raw} resolves to {resolved}, which is outside the workspace {root}. "
            "File tools can only access files inside the workspace."
        )


@dataclass(frozen=True, slots=True)
class Workspace:
    """The directory file tools are confined to. ``root`` is absolute with symlinks resolved."""

    root: Path

    @classmethod
    def at(cls, root: str | os.PathLike[str]) -> Workspace:
        """The workspace at ``root`` (must be an existing directory)."""
        resolved = Path(root).resolve(strict=True)
        if not resolved.is_dir():
            raise NotADirectoryError(f"workspace root {resolved} is not a directory")
        return cls(resolved)

    def resolve(self, raw: str) -> Path:
        """``raw`` (absolute, relative to the root, or ``~``-prefixed) as a real path inside the
        workspace. Symlinks are followed on every existing component, so neither ``../`` nor a
        link pointing outside escapes; raises :class:`PathOutsideWorkspace` without touching the
        target. (A link swapped between this check and the file operation is not guarded against.)"""
        if not raw.strip():
            raise ToolError("Path must not be empty.")
        if "\x00" in raw:
            raise ToolError("Path must not contain NUL characters.")
        expanded = os.path.expanduser(raw) if raw.startswith("~") else raw
        candidate = Path(expanded) if os.path.isabs(expanded) else self.root / expanded
        try:
            resolved = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as error:
            raise ToolError(f"Cannot resolve path {raw}: {error}") from error
        if resolved != self.root and self.root not in resolved.parents:
            raise PathOutsideWorkspace(raw, resolved, self.root)
        return resolved

    def contains(self, path: Path) -> bool:
        """True when the already-resolved ``path`` is the root or beneath it."""
        return path == self.root or self.root in path.parents
