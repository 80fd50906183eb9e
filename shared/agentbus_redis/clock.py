"""Clocks: the only place in shared/ that reads the time.

A clock returns the ISO-8601 UTC timestamp string Claude Code writes (``new Date().toISOString()``:
millisecond precision and a ``Z`` suffix, R1.2). Timestamps are kept as strings end to end so a
transcript round-trips byte-exact.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

Clock = Callable[[], str]
"""Returns the current time as ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""


def format_timestamp(moment: datetime) -> str:
    """Render ``moment`` (any timezone) the way JavaScript's ``toISOString`` does."""
    # isoformat truncates to milliseconds as toISOString does, and is ~2× cheaper than strftime (one is made
    # per message); in UTC it always ends in "+00:00".
    return moment.astimezone(UTC).isoformat(timespec="milliseconds")[:-6] + "Z"


def utc_now() -> str:
    """The system clock."""
    return format_timestamp(datetime.now(UTC))


def epoch_ms() -> int:
    """The system clock in epoch milliseconds (deadlines, leases and records on the bus)."""
    return int(time.time() * 1000)


class FixedClock:
    """A deterministic clock for tests: starts at ``start`` and advances ``step_ms`` per call."""

    def __init__(self, start: datetime | None = None, *, step_ms: int = 1) -> None:
        self._now = start if start is not None else datetime(2026, 1, 1, tzinfo=UTC)
        self._step = timedelta(milliseconds=step_ms)

    def __call__(self) -> str:
        value = format_timestamp(self._now)
        self._now += self._step
        return value
