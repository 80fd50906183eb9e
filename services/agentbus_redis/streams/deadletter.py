"""Dead letters: entries the runtime gave up on, kept with their history so they can be replayed.

A dead letter is an entry of the source stream's dead-letter stream (``<stream>:dlq``). Its fields are
the history (``type``, ``stream``, ``group``, ``entry_id``, ``consumer``, ``delivery_count``, ``reason``,
``detail``, ``at_ms``) followed by every original field under ``f:<name>`` with its value byte for byte,
so a replay writes back exactly what was read. ``reason`` is a short bounded word (a metrics label);
specifics go to ``detail``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, ConfigDict

from agentbus_redis.streams.entries import StreamEntry, decode_text, field_bytes, id_text
from agentbus_redis.streams.names import StreamNames

REASON_MAX_DELIVERIES = "max_deliveries"
"""The entry was delivered more than ``max_deliveries`` times without being settled."""
REASON_HANDLER_FAILED = "handler_failed"
"""An ordered lane's handler raised on this entry alone ``max_deliveries`` times; the detail starts with the
last exception (type and message)."""
REASON_ENTRY_DELETED = "entry_deleted"
"""The entry was deleted or trimmed from its stream while still pending: only its id is left."""
REASON_OUTPUT_WRITE_FAILED = "output_write_failed"
"""Redis rejected a write of this batch (a script call stops at the rejected command): replay once fixed."""

ORIGINAL_FIELD_PREFIX = "f:"
_HISTORY_FIELDS = ("type", "stream", "group", "entry_id", "consumer", "delivery_count", "reason", "detail", "at_ms")


class DeadLetterDecodeError(ValueError):
    """An entry of a dead-letter stream lacks a history field or has a malformed one."""

    def __init__(self, dlq_stream: str, dlq_id: str, reason: str) -> None:
        super().__init__(f"{dlq_stream} entry {dlq_id}: {reason}")
        self.dlq_stream = dlq_stream
        self.dlq_id = dlq_id


class DeadLetter(BaseModel):
    """One dead-lettered entry with its history; ``dlq_id`` is set once it is stored."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_bytes="base64", val_json_bytes="base64")

    type: Literal["dead_letter"] = "dead_letter"
    stream: str
    group: str
    entry_id: str
    consumer: str
    delivery_count: int
    reason: str
    detail: str = ""
    at_ms: int
    fields: dict[str, bytes]
    dlq_id: str | None = None

    @classmethod
    def of_entry(
        cls, entry: StreamEntry, *, group: str, consumer: str, reason: str, detail: str = "", at_ms: int
    ) -> DeadLetter:
        """The dead letter of a live entry (its fields and delivery count are kept)."""
        return cls(
            stream=entry.stream,
            group=group,
            entry_id=entry.entry_id,
            consumer=consumer,
            delivery_count=entry.delivery_count,
            reason=reason,
            detail=detail,
            at_ms=at_ms,
            fields=dict(entry.fields),
        )

    def text_fields(self) -> dict[str, str]:
        """The original fields as text for display (undecodable bytes shown as ``\\x..`` escapes)."""
        return {name: value.decode("utf-8", "backslashreplace") for name, value in self.fields.items()}

    def to_stream_fields(self) -> dict[bytes, bytes]:
        """The fields of the dead-letter stream entry (history first, then ``f:``-prefixed originals)."""
        history = {
            "type": self.type,
            "stream": self.stream,
            "group": self.group,
            "entry_id": self.entry_id,
            "consumer": self.consumer,
            "delivery_count": str(self.delivery_count),
            "reason": self.reason,
            "detail": self.detail,
            "at_ms": str(self.at_ms),
        }
        encoded = {field_bytes(name): field_bytes(value) for name, value in history.items()}
        for name, value in self.fields.items():
            encoded[field_bytes(ORIGINAL_FIELD_PREFIX + name)] = value
        return encoded

    @classmethod
    def from_stream_fields(cls, dlq_stream: str, dlq_id: str, raw: Mapping[bytes, bytes]) -> DeadLetter:
        """Parse a dead-letter stream entry; raises ``DeadLetterDecodeError`` on a malformed one."""
        history: dict[str, str] = {}
        originals: dict[str, bytes] = {}
        for raw_name, value in raw.items():
            name = decode_text(raw_name)
            if name.startswith(ORIGINAL_FIELD_PREFIX):
                originals[name[len(ORIGINAL_FIELD_PREFIX) :]] = value
            else:
                history[name] = decode_text(value)
        missing = [name for name in _HISTORY_FIELDS if name not in history]
        if missing:
            raise DeadLetterDecodeError(dlq_stream, dlq_id, f"missing history fields {missing}")
        if history["type"] != "dead_letter":
            raise DeadLetterDecodeError(dlq_stream, dlq_id, f"type is {history['type']!r}, not 'dead_letter'")
        try:
            delivery_count = int(history["delivery_count"])
            at_ms = int(history["at_ms"])
        except ValueError as exc:
            raise DeadLetterDecodeError(dlq_stream, dlq_id, f"bad number: {exc}") from None
        return cls(
            stream=history["stream"],
            group=history["group"],
            entry_id=history["entry_id"],
            consumer=history["consumer"],
            delivery_count=delivery_count,
            reason=history["reason"],
            detail=history["detail"],
            at_ms=at_ms,
            fields=originals,
            dlq_id=dlq_id,
        )


def _letters(dlq_stream: str, raw: Iterable[tuple[Any, Any]]) -> list[DeadLetter]:
    return [DeadLetter.from_stream_fields(dlq_stream, id_text(raw_id), fields) for raw_id, fields in raw]


async def list_dead_letters(
    redis: aioredis.Redis, dlq_stream: str, *, start: str = "-", end: str = "+", count: int = 100
) -> list[DeadLetter]:
    """Up to ``count`` dead letters of ``dlq_stream`` from ``start`` to ``end`` (oldest first)."""
    raw = await redis.xrange(dlq_stream, start, end, count=count)
    return _letters(dlq_stream, raw or [])


async def newest_dead_letters(redis: aioredis.Redis, dlq_stream: str, *, count: int) -> list[DeadLetter]:
    """The ``count`` newest dead letters of ``dlq_stream``, oldest first."""
    raw = await redis.xrevrange(dlq_stream, "+", "-", count=count)
    return _letters(dlq_stream, reversed(raw or []))


async def show_dead_letter(redis: aioredis.Redis, dlq_stream: str, dlq_id: str) -> DeadLetter | None:
    """The dead letter stored as ``dlq_id`` in ``dlq_stream``, or None when there is none."""
    letters = await list_dead_letters(redis, dlq_stream, start=dlq_id, end=dlq_id, count=1)
    return letters[0] if letters else None


async def replay_dead_letter(redis: aioredis.Redis, dlq_stream: str, dlq_id: str) -> str | None:
    """Write the original fields back to the original stream, then delete the dead letter.

    Returns the new entry id, or None when ``dlq_id`` is not in ``dlq_stream``. The two writes are not
    one transaction (the source stream and its DLQ may sit in different Cluster slots): a crash between
    them leaves the dead letter in place, so a replay can duplicate an entry but never lose one.
    """
    letter = await show_dead_letter(redis, dlq_stream, dlq_id)
    if letter is None:
        return None
    fields: dict[Any, Any] = {field_bytes(name): value for name, value in letter.fields.items()}
    new_id = await redis.xadd(letter.stream, fields)
    await redis.xdel(dlq_stream, dlq_id)
    return id_text(new_id)


async def purge_dead_letters(redis: aioredis.Redis, dlq_stream: str, ids: Iterable[str] | None = None) -> int:
    """Delete the given dead letters (all of ``dlq_stream`` when ``ids`` is None); returns how many."""
    if ids is None:
        length: int = await redis.xlen(dlq_stream)
        await redis.delete(dlq_stream)
        return length
    id_list = list(ids)
    if not id_list:
        return 0
    deleted: int = await redis.xdel(dlq_stream, *id_list)
    return deleted


async def dead_letter_streams(redis: aioredis.Redis, names: StreamNames) -> list[str]:
    """Every dead-letter stream under ``names.prefix`` (SCAN, so safe on a busy server)."""
    found: list[str] = []
    async for key in redis.scan_iter(match=names.dead_letter_pattern(), _type="stream", count=500):
        found.append(key.decode("utf-8") if isinstance(key, bytes) else str(key))
    return sorted(found)
