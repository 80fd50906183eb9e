"""P7.9–P7.11: migrating a session's JSON objects to version 3, in place of pi's ``migrateToCurrentVersion``.

Works on the parsed JSON objects (as pi does) so that the keys it adds land where JavaScript puts them:
at the end of the object. Ids are random in pi; here they come from an injected :data:`IdSource`, so a
test can make them deterministic. Already-v3 sessions are returned untouched (idempotent).
"""

from __future__ import annotations

from typing import Any

from agentbus_redis.ids import IdSource
from agentbus_redis.pi.constants import CURRENT_SESSION_VERSION

JsonDict = dict[str, Any]


def session_version(header: JsonDict) -> int:
    """P7.4: a header without ``version`` is version 1."""
    version = header.get("version")
    return version if isinstance(version, int) else 1


def short_id(ids: IdSource, taken: set[str]) -> str:
    """P7.5: 8 lowercase hex characters of a fresh UUID, drawn again on collision (100 tries, then the full
    UUID). pi takes the first 8; the last 8 are as random in a v4 UUID and keep sequential test ids apart."""
    for _ in range(100):
        candidate = ids().replace("-", "")[-8:].lower()
        if candidate not in taken:
            return candidate
    return ids()


def migrate_v1_to_v2(header: JsonDict, entries: list[JsonDict], ids: IdSource) -> None:
    """P7.10: one linear chain of fresh ids; ``firstKeptEntryIndex`` (header-inclusive) → ``firstKeptEntryId``."""
    header["version"] = 2
    taken: set[str] = set()
    previous: str | None = None
    for entry in entries:
        entry_id = short_id(ids, taken)
        taken.add(entry_id)
        entry["id"] = entry_id
        entry["parentId"] = previous
        previous = entry_id
    raw = [header, *entries]
    for entry in entries:
        if entry.get("type") != "compaction" or "firstKeptEntryIndex" not in entry:
            continue
        index = entry.pop("firstKeptEntryIndex")
        if isinstance(index, int) and 0 < index < len(raw):
            entry["firstKeptEntryId"] = raw[index]["id"]


def migrate_v2_to_v3(header: JsonDict, entries: list[JsonDict]) -> None:
    """P7.11: the ``hookMessage`` role became ``custom``."""
    header["version"] = 3
    for entry in entries:
        message = entry.get("message")
        if entry.get("type") == "message" and isinstance(message, dict) and message.get("role") == "hookMessage":
            message["role"] = "custom"


def migrate_to_current(header: JsonDict, entries: list[JsonDict], ids: IdSource) -> int | None:
    """Migrate in place; returns the version the session had when it was older than current, else None."""
    version = session_version(header)
    if version >= CURRENT_SESSION_VERSION:
        return None
    if version < 2:
        migrate_v1_to_v2(header, entries, ids)
    migrate_v2_to_v3(header, entries)
    return version
