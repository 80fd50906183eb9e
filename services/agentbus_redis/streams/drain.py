"""Whether a consumer group has drained a stream, decided from entry ids — never from ``XINFO GROUPS``' lag.

Redis 7.0 can report ``lag > 0`` forever for a group that has read and acknowledged everything: after an
AOF rewrite, the reads that follow are logged as ``XCLAIM``/``XGROUP SETID`` without the group's read
counter, so once the AOF is loaded again (a restart) ``entries-read`` stays behind ``entries-added`` while
``last-delivered-id`` is the stream's ``last-generated-id`` and nothing is pending (reproduced in
tests/integration/test_phantom_lag.py). ``lag`` is a counter Redis derives; the ids are the truth: a group has
drained a stream up to an id when its last-delivered id has reached it and no entry up to it is pending.
``agentbus replay``'s wait and ``agentbus streams info`` use :func:`group_drained`; KEDA's lag triggers
cannot (deploy/README.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from agentbus_redis.streams.entries import id_text


def stream_id_key(entry_id: str) -> tuple[int, int]:
    """An entry id (``ms-seq``, or ``ms``) as a sortable pair."""
    millis, _, sequence = entry_id.partition("-")
    return int(millis), int(sequence or 0)


@dataclass(frozen=True, slots=True)
class GroupPosition:
    """Where one consumer group is on a stream."""

    last_delivered: str
    oldest_pending: str | None
    """The lowest id delivered and not yet acknowledged (None: nothing pending)."""


def group_drained(position: GroupPosition, *, upto: str) -> bool:
    """True when the group has been delivered every entry up to ``upto`` (the stream's last-generated-id
    for "everything") and has acknowledged all of them."""
    if stream_id_key(position.last_delivered) < stream_id_key(upto):
        return False
    return position.oldest_pending is None or stream_id_key(position.oldest_pending) > stream_id_key(upto)


def group_positions(groups_reply: Any, pending: Mapping[str, Any]) -> dict[str, GroupPosition]:
    """Positions from an ``XINFO GROUPS`` reply and ``{group: XPENDING summary}`` of the groups with pending
    entries."""
    positions: dict[str, GroupPosition] = {}
    for row in groups_reply:
        name = id_text(row["name"])
        summary = pending.get(name)
        oldest = summary.get("min") if isinstance(summary, Mapping) else None
        positions[name] = GroupPosition(
            last_delivered=id_text(row["last-delivered-id"]),
            oldest_pending=id_text(oldest) if oldest is not None and int(row["pending"] or 0) else None,
        )
    return positions


@dataclass(frozen=True, slots=True)
class StreamProgress:
    """A stream's last-generated id and every group's position on it (read in one round trip + XPENDING)."""

    last_generated: str
    groups: dict[str, GroupPosition]

    def drained(self, group: str, *, upto: str | None = None) -> bool:
        """Whether ``group`` exists and has drained the stream up to ``upto`` (default: its end)."""
        position = self.groups.get(group)
        return position is not None and group_drained(position, upto=upto or self.last_generated)


async def stream_progress(redis: aioredis.Redis, stream: str) -> StreamProgress | None:
    """The stream's :class:`StreamProgress`, or None when it does not exist."""
    pipe = redis.pipeline(transaction=False)
    pipe.xinfo_stream(stream)
    pipe.xinfo_groups(stream)
    stream_info, groups_reply = await pipe.execute(raise_on_error=False)
    for reply in (stream_info, groups_reply):
        if isinstance(reply, Exception):
            if "no such key" in str(reply).lower():
                return None
            raise reply  # e.g. NOPERM: a credential that may not watch the stream must not look "drained"
    pending = {}
    for row in groups_reply:
        if int(row["pending"] or 0):
            name = id_text(row["name"])
            pending[name] = await redis.xpending(stream, name)
    return StreamProgress(id_text(stream_info["last-generated-id"]), group_positions(groups_reply, pending))
