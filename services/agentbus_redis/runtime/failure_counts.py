"""Handler failures of an ordered lane's entries, counted apart from their deliveries.

A pending entry's delivery count (``XPENDING``) also grows when nothing failed: every takeover claim of a
lease that moved while a batch was in hand, every re-read of the consumer's own pending list after a
restart or a Redis hiccup. Dead-lettering on that count sent healthy entries to the dead-letter stream
after a few lease bounces. An ordered lane (one reader per stream) therefore records each handler
failure in a hash beside its stream (``<stream>:failures``, the same hash tag; one field per group and
entry, since several groups read one stream, e.g. normalization and transcripts the log) and dead-letters
an entry once it has failed ``max_deliveries`` times. An entry delivered more than ``ORDERED_DELIVERY_CEILING ×
max_deliveries`` times with fewer failures recorded is a crash loop (the handler takes its process down
before it can record anything) and is dead-lettered too.

Each record keeps the handler's last error beside its count (``<group>:<entry id>:error``), so the dead
letter of an entry that failed ``max_deliveries`` times says why (reason ``handler_failed``).

Deliveries that no failure explains also decide how a lane re-reads its pending list (``consumer.py``): an
entry in hand at least twice without an outcome (:func:`is_suspect`) may be what takes the process down, so
it is handled alone; a healthy entry that shared a batch with it then never reaches the crash-loop ceiling.

The unordered pool keeps counting deliveries: its redeliveries are its retries.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.deadletter import REASON_HANDLER_FAILED, REASON_MAX_DELIVERIES

FAILURES_SUFFIX = ":failures"

ORDERED_DELIVERY_CEILING = 4
"""Deliveries an ordered lane allows per ``max_deliveries``, when failures do not explain them."""

ERROR_SUFFIX = ":error"
"""A record's last error is kept in the field ``<group>:<entry id>:error``."""

MAX_ERROR_CHARS = 500

FAILURES_TTL_MS = 7 * 24 * 3600 * 1000
"""A failure record of an entry that left the stream some other way (trimmed while pending) goes after this."""


def failures_key(stream: str) -> str:
    """The hash of ``stream``'s failure counts (``<group>:<entry id>`` → failures), in the stream's slot."""
    return stream + FAILURES_SUFFIX


def exhausted(deliveries: int, failures: int, max_deliveries: int, *, ordered: bool) -> tuple[str, str] | None:
    """The dead letter's (reason, detail) of an entry that has had its chances, or None while it has more."""
    if not ordered:
        return (REASON_MAX_DELIVERIES, f"delivered {deliveries} times") if deliveries > max_deliveries else None
    if failures >= max_deliveries:
        return REASON_HANDLER_FAILED, f"failed {failures} times, delivered {deliveries} times"
    if deliveries > max_deliveries * ORDERED_DELIVERY_CEILING:
        return REASON_MAX_DELIVERIES, f"delivered {deliveries} times with {failures} failure(s) recorded: a crash loop"
    return None


def is_suspect(deliveries: int, failures: int) -> bool:
    """Whether a pending entry (not in hand now) was in hand at least twice with no outcome recorded: once is
    a restart or a lease move with a batch in hand; twice may be the entry taking its process down."""
    return deliveries - failures >= 2


def error_text(error: BaseException) -> str:
    """The handler's exception as a dead letter's detail: its type, then its message (bounded)."""
    return f"{type(error).__name__}: {error}"[:MAX_ERROR_CHARS]


def _fields(group: str, entry_ids: Sequence[str]) -> list[str]:
    """The hash fields of ``group``'s records of ``entry_ids``: one group's failures are not another's."""
    return [f"{group}:{entry_id}" for entry_id in entry_ids]


async def read_failures(redis: Any, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, int]:
    """The failures ``group`` recorded for ``entry_ids`` (those with none are left out)."""
    values = await redis.hmget(failures_key(stream), _fields(group, entry_ids))
    return {entry_id: int(value) for entry_id, value in zip(entry_ids, values, strict=True) if value is not None}


async def read_errors(redis: Any, stream: str, group: str, entry_ids: Sequence[str]) -> dict[str, str]:
    """The last error ``group`` recorded for each of ``entry_ids`` (those with none are left out)."""
    fields = [f"{field}{ERROR_SUFFIX}" for field in _fields(group, entry_ids)]
    values = await redis.hmget(failures_key(stream), fields)
    return {
        entry_id: value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        for entry_id, value in zip(entry_ids, values, strict=True)
        if value is not None
    }


def queue_failures(
    calls: KeyCalls, stream: str, group: str, entry_ids: Sequence[str], *, error: str | None = None
) -> None:
    """Count one more failure of ``group`` for each of ``entry_ids`` (with the handler's ``error``)."""
    key = failures_key(stream)
    for field in _fields(group, entry_ids):
        calls.add("HINCRBY", key, field, 1)
        if error is not None:
            calls.add("HSET", key, f"{field}{ERROR_SUFFIX}", error)
    calls.add("PEXPIRE", key, FAILURES_TTL_MS)


def queue_forget(calls: KeyCalls, stream: str, group: str, entry_ids: Sequence[str]) -> None:
    """Drop ``group``'s records of entries that left its pending list (acked or dead-lettered)."""
    if entry_ids:
        fields = _fields(group, entry_ids)
        calls.add_members("HDEL", failures_key(stream), [*fields, *(f"{field}{ERROR_SUFFIX}" for field in fields)])
