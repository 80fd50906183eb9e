"""Id sources: the only place in shared/ that mints random ids (R1.2: random v4 UUID strings)."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable

IdSource = Callable[[], str]
"""Returns a fresh UUID-shaped string."""


def random_uuid() -> str:
    """A random v4 UUID string (the production id source): ``uuid.uuid4`` of the OS generator's 16 bytes, read through
    ``secrets.token_bytes`` (what ``uuid4`` reads, ``os.urandom``)."""
    return str(uuid.UUID(bytes=secrets.token_bytes(16), version=4))


class SequentialIds:
    """Deterministic UUID-shaped ids for tests: ``00000000-0000-4000-8000-000000000001``, …"""

    def __init__(self, start: int = 1) -> None:
        self._next = start

    def __call__(self) -> str:
        value = self._next
        self._next += 1
        return f"00000000-0000-4000-8000-{value:012x}"
