"""How bus records sit in stream entries: one field ``data`` holding the record's JSON."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import orjson
from pydantic import ValidationError

from agentbus_redis.bus.events import SCHEMA_VERSION
from agentbus_redis.runtime.batch import Poison
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.wire import WireModel

DATA_FIELD = "data"
Record = TypeVar("Record")


def entry_fields(record: WireModel) -> dict[str, bytes]:
    """The fields of the stream entry that carries ``record``."""
    return {DATA_FIELD: record.to_wire_json().encode()}


def signed_entry_fields(record: WireModel, internal_key: bytes) -> dict[str, bytes]:
    """The fields of a worker's ingress entry: ``data`` and its authenticator (bus/internal_events.py)."""
    # Imported here: the internal-event rules pull in the ledger, which a CLI command reading a log never needs.
    from agentbus_redis.bus.internal_events import AUTH_FIELD, internal_event_proof

    data = record.to_wire_json().encode()
    return {DATA_FIELD: data, AUTH_FIELD: internal_event_proof(internal_key, data)}


def decode_entry(entry: StreamEntry, parse: Callable[[bytes], Record]) -> Record | Poison:
    """Parse ``entry``'s record, or say why it is poison (typed, with the entry id and the failing location)."""
    raw = entry.fields.get(DATA_FIELD)
    if raw is None:
        return Poison("decode_error", f"{entry.stream} {entry.entry_id}: no {DATA_FIELD!r} field")
    try:
        record = parse(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in issue['loc'])}: {issue['msg']}" for issue in error.errors()[:5]
        )
        declared = _declared_version(raw)
        if declared is not None and declared != SCHEMA_VERSION:
            # A record of another version fails this version's model for that reason, not for the
            # field it trips over first.
            detail = f"v={declared} (this worker reads v={SCHEMA_VERSION}); {problems}"
            return Poison("unsupported_schema_version", f"{entry.stream} {entry.entry_id}: {detail}")
        reason = "unsupported_schema_version" if _version_of(error) else "invalid_entry"
        return Poison(reason, f"{entry.stream} {entry.entry_id}: {problems}")
    version = getattr(record, "v", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        return Poison("unsupported_schema_version", f"{entry.stream} {entry.entry_id}: v={version}")
    return record


def _declared_version(raw: bytes) -> int | None:
    """The integer ``v`` a record that failed validation declares, if it is a JSON object with one."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    version = body.get("v") if isinstance(body, dict) else None
    return version if isinstance(version, int) and not isinstance(version, bool) else None


def _version_of(error: ValidationError) -> bool:
    return any(issue["loc"][:1] == ("v",) for issue in error.errors())
