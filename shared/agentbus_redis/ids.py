"""Id sources: the only place in shared/ that mints random ids (R1.2: random v4 UUID strings)."""

from __future__ import annotations

import secrets
from collections.abc import Callable

IdSource = Callable[[], str]
"""Returns a fresh UUID-shaped string."""


def random_uuid() -> str:
    """A random v4 UUID string (the production id source): ``str(uuid.uuid4())``, made without the ``UUID``
    object (≈ 2 µs less an id; ingestion mints one per streamed block and per prompt). The same 16 bytes from the
    OS's generator (``uuid.uuid4`` reads ``os.urandom(16)``, as ``secrets.token_bytes`` does), the version
    nibble set to 4 and the variant bits to ``10`` (RFC 4122 §4.4), lowercase hex in 8-4-4-4-12 groups."""
    raw = bytearray(secrets.token_bytes(16))
    raw[6] = (raw[6] & 0x0F) | 0x40
    raw[8] = (raw[8] & 0x3F) | 0x80
    text = raw.hex()
    return f"{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:]}"


class SequentialIds:
    """Deterministic UUID-shaped ids for tests: ``00000000-0000-4000-8000-000000000001``, …"""

    def __init__(self, start: int = 1) -> None:
        self._next = start

    def __call__(self) -> str:
        value = self._next
        self._next += 1
        return f"00000000-0000-4000-8000-{value:012x}"
