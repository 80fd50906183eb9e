"""Reading and writing pi session files (P7.2, P7.3).

pi skips lines it cannot parse without a word; agentbus skips them too but reports each one with its line
number (:class:`PiLineProblem`), and it decodes invalid UTF-8 with the replacement character instead of
failing. A file is a pi session only if its first parsed object is a ``session`` header with a string
``id`` (P7.3); anything else raises :class:`NotAPiSession`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

from agentbus_redis.ids import IdSource
from agentbus_redis.pi.entries import PiEntry, PiSessionHeader
from agentbus_redis.pi.migration import migrate_to_current

ENTRY_ADAPTER: TypeAdapter[PiEntry] = TypeAdapter(PiEntry)


class NotAPiSession(ValueError):
    """The data is not a pi session file (P7.3: no ``session`` header with a string ``id`` first)."""


@dataclass(frozen=True, slots=True)
class PiLineProblem:
    """A line pi would skip silently, or a line decoded with replacement characters."""

    line: int
    kind: Literal["invalid_json", "not_an_object", "invalid_utf8", "invalid_entry"]
    detail: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.kind}: {self.detail}"


@dataclass(frozen=True, slots=True)
class PiSession:
    """A parsed (and, if it was older, migrated) pi session."""

    header: PiSessionHeader
    entries: list[PiEntry]
    lines: list[int]
    """1-based line number of each entry in the file it was read from."""
    problems: list[PiLineProblem] = field(default_factory=list)
    migrated_from: int | None = None
    """The file's version when it was older than 3 (the entries are the migrated ones)."""
    raw_header: str | None = None
    raw_entries: list[str | None] | None = None
    """The text of each entry's line as read: :func:`write_pi_session` writes an unchanged entry back
    byte for byte and a changed one in its original key order."""

    @property
    def session_id(self) -> str:
        return self.header.id


def _objects(data: bytes) -> tuple[list[tuple[int, dict[str, Any], str]], list[PiLineProblem]]:
    problems: list[PiLineProblem] = []
    objects: list[tuple[int, dict[str, Any], str]] = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            text = raw.decode()
        except UnicodeDecodeError as error:
            text = raw.decode(errors="replace")
            problems.append(PiLineProblem(number, "invalid_utf8", f"byte {error.start} replaced with U+FFFD"))
        try:
            value = json.loads(text)
        except json.JSONDecodeError as error:
            problems.append(PiLineProblem(number, "invalid_json", error.msg))
            continue
        if not isinstance(value, dict):
            problems.append(PiLineProblem(number, "not_an_object", type(value).__name__))
            continue
        objects.append((number, value, text.rstrip("\r")))
    return objects, problems


def looks_like_pi_session(data: bytes) -> bool:
    """P7.3: the first non-blank line is a ``session`` header with a string ``id``."""
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            first = json.loads(raw.decode(errors="replace"))
        except json.JSONDecodeError:
            return False
        return isinstance(first, dict) and first.get("type") == "session" and isinstance(first.get("id"), str)
    return False


def read_pi_session(data: bytes, *, ids: IdSource) -> PiSession:
    """Parse a session file, migrating it to version 3 in memory (P7.9; pi rewrites the file, we don't)."""
    objects, problems = _objects(data)
    if not objects or objects[0][1].get("type") != "session" or not isinstance(objects[0][1].get("id"), str):
        raise NotAPiSession('the first line is not a pi session header ({"type":"session","id":…})')
    _, header, raw_header = objects[0]
    values = [value for _, value, _ in objects[1:]]
    migrated_from = migrate_to_current(header, values, ids)
    entries: list[PiEntry] = []
    lines: list[int] = []
    raw_entries: list[str | None] = []
    for (number, _, raw), value in zip(objects[1:], values, strict=True):
        try:
            entries.append(ENTRY_ADAPTER.validate_python(value, by_alias=True, by_name=False))
        except ValidationError as error:  # a shape even the "other" variants refuse (e.g. a non-string id)
            problems.append(PiLineProblem(number, "invalid_entry", error.errors()[0]["msg"]))
            continue
        lines.append(number)
        raw_entries.append(raw)
    parsed = PiSessionHeader.model_validate(header, by_alias=True, by_name=False)
    return PiSession(
        header=parsed,
        entries=entries,
        lines=lines,
        problems=problems,
        migrated_from=migrated_from,
        raw_header=raw_header,
        raw_entries=raw_entries,
    )


def dump_line(obj: dict[str, Any]) -> str:
    """P7.2: compact JSON, non-ASCII unescaped, one line."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False)


def in_key_order(value: Any, original: Any) -> Any:
    """``value`` with the keys of every object in ``original``'s order (new keys last, as JavaScript
    appends them)."""
    if isinstance(value, dict) and isinstance(original, dict):
        ordered = {key: in_key_order(value[key], original[key]) for key in original if key in value}
        return ordered | {key: item for key, item in value.items() if key not in ordered}
    if isinstance(value, list) and isinstance(original, list):
        return [in_key_order(item, before) for item, before in zip(value, original, strict=False)] + value[
            len(original) :
        ]
    return value


def _line(wire: dict[str, Any], raw: str | None) -> str:
    if raw is None:
        return dump_line(wire)
    original = json.loads(raw)
    return raw if original == wire else dump_line(in_key_order(wire, original))


def write_pi_session(session: PiSession) -> bytes:
    """The session as pi writes a file: the header, then one line per entry, each ending in ``\\n``; lines
    read from a file keep their text where unchanged and their key order where changed (a migration's new
    keys come last, P7.10)."""
    raws = session.raw_entries if session.raw_entries is not None else [None] * len(session.entries)
    lines = [
        _line(session.header.to_wire(), session.raw_header),
        *(_line(entry.to_wire(), raw) for entry, raw in zip(session.entries, raws, strict=False)),
    ]
    return "".join(line + "\n" for line in lines).encode()
