"""A module-level logger that imports structlog at its first call, not at the module's import.

Importing structlog costs ~0.2 s (``structlog.dev`` pulls in rich and pygments for pretty tracebacks), and
the modules a CLI command or an SDK program imports (the client, ``ride_out``, the tool catalog) log only
on rare paths: a retry, a pruned entry. ``structlog.get_logger`` already defers binding to the first call;
this defers the import too, so a command that never logs never loads structlog (issue 27, "Fast commands").
Workers configure structlog before anything logs, so every call sees the same configuration as before.
"""

from __future__ import annotations

from typing import Any


class LazyLogger:
    """Stands in for ``structlog.get_logger(name)``; every attribute is the real logger's."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attribute: str) -> Any:
        if self._logger is None:
            import structlog

            self._logger = structlog.get_logger(self._name)
        return getattr(self._logger, attribute)


def get_logger(name: str) -> Any:
    """``structlog.get_logger(name)``, imported when the logger is first used."""
    return LazyLogger(name)
