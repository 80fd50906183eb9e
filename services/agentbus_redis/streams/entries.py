"""Stream entries as the runtime hands them to handlers.

Field names are decoded with ``surrogateescape`` so any byte string survives the round trip
(``field_bytes``); values stay ``bytes`` because they are mostly JSON that orjson reads directly.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

RawEntry = tuple[bytes, Mapping[bytes, bytes] | None]
"""One entry as redis-py returns it: ``(id, fields)``; fields are empty/None when the entry was deleted."""

EntryKey = tuple[str, str]
"""``(stream, entry id)``: what names an entry across streams. An id alone names it only within its stream:
two shards' streams hand out the same id to entries written in the same millisecond."""


class EntryDecodeError(ValueError):
    """A field of a stream entry is missing or is not valid JSON."""

    def __init__(self, stream: str, entry_id: str, field: str, reason: str) -> None:
        super().__init__(f"{stream} entry {entry_id} field {field!r}: {reason}")
        self.stream = stream
        self.entry_id = entry_id
        self.field = field
        self.reason = reason


def decode_text(raw: bytes) -> str:
    """Bytes from Redis as ``str`` without losing anything (undecodable bytes become surrogates)."""
    return raw.decode("utf-8", "surrogateescape")


def id_text(value: bytes | str | int) -> str:
    """An entry id (or other ASCII token) from a redis-py reply as ``str``."""
    return value.decode("ascii") if isinstance(value, bytes) else str(value)


def field_bytes(name: str) -> bytes:
    """The inverse of ``decode_text`` for field names."""
    return name.encode("utf-8", "surrogateescape")


@dataclass(frozen=True, slots=True)
class StreamEntry:
    """One entry read from ``stream`` through a consumer group.

    ``delivery_count`` is 1 for entries read with ``>`` and the group's counter (from XPENDING) for
    entries taken from a pending list (restart drain, XAUTOCLAIM).
    """

    stream: str
    entry_id: str
    fields: dict[str, bytes]
    delivery_count: int = 1

    @property
    def key(self) -> EntryKey:
        """``(stream, entry id)``: key anything that tracks entries of more than one stream by this."""
        return (self.stream, self.entry_id)

    def json(self, field: str = "data") -> Any:
        """The JSON value of ``field``; raises ``EntryDecodeError`` with the entry id when it is bad."""
        try:
            raw = self.fields[field]
        except KeyError:
            raise EntryDecodeError(self.stream, self.entry_id, field, "missing") from None
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EntryDecodeError(self.stream, self.entry_id, field, f"invalid JSON: {exc}") from None


FIELD_NAMES_KEPT = 1024
"""How many distinct field names :data:`_FIELD_NAMES` remembers (a stream's entries repeat a handful)."""


class _FieldNames(dict[bytes, str]):
    """``decode_text`` of field names, remembered: every entry of a stream repeats the same few names, and a dict
    hit costs less than a decode. The same ``str`` comes out either way; past :data:`FIELD_NAMES_KEPT` names
    (arbitrary producers) the others are decoded each time instead of growing the dict."""

    def __missing__(self, raw: bytes) -> str:
        name = decode_text(raw)
        if len(self) < FIELD_NAMES_KEPT:
            self[raw] = name
        return name


_FIELD_NAMES = _FieldNames()


def decode_entries(stream: str, raw: Sequence[RawEntry]) -> tuple[list[StreamEntry], list[str]]:
    """Split a redis-py reply into live entries and the ids of deleted ones (no fields left)."""
    names = _FIELD_NAMES
    entries: list[StreamEntry] = []
    deleted: list[str] = []
    for raw_id, raw_fields in raw:
        entry_id = raw_id.decode("ascii")
        if not raw_fields:
            # A stream entry always has at least one field: an empty one was XDELed or trimmed while pending.
            deleted.append(entry_id)
            continue
        fields = {names[key]: value for key, value in raw_fields.items()}
        entries.append(StreamEntry(stream, entry_id, fields))
    return entries, deleted


def decode_rows(stream: str, rows: Sequence[Sequence[Any]]) -> tuple[list[StreamEntry], list[str]]:
    """:func:`decode_entries` of entries as a script answers them (``fenced_reads.py``): ``[id, [name, value, …]]``
    rows, the fields a flat list (empty or nil once deleted), decoded in one pass with no dict in between."""
    names = _FIELD_NAMES
    entries: list[StreamEntry] = []
    deleted: list[str] = []
    for raw_id, flat in rows:
        entry_id = raw_id.decode("ascii")
        if not flat:
            deleted.append(entry_id)
            continue
        if len(flat) % 2:
            msg = f"{stream} entry {entry_id}: {len(flat)} field names and values (not pairs)"
            raise ValueError(msg)
        pairs = iter(flat)
        # Two references to one iterator: zip takes a name, then its value (pairs: checked above). A repeated name
        # keeps its last value, as a dict built from the pairs does.
        fields = {names[name]: value for name, value in zip(pairs, pairs, strict=False)}
        entries.append(StreamEntry(stream, entry_id, fields))
    return entries, deleted


def stream_reply_entries(reply: Any) -> list[RawEntry]:
    """The entries of a single-stream XREADGROUP reply.

    redis-py returns ``[[name, entries]]`` on RESP2 and ``{name: [entries]}`` on RESP3; an empty read is
    ``[]``/``None`` or ``{}``.
    """
    if not reply:
        return []
    if isinstance(reply, Mapping):
        (wrapped,) = reply.values()
        return list(wrapped[0]) if wrapped else []
    return list(reply[0][1])
