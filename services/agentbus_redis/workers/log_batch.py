"""Decoding a batch of canonical-log entries: shared by the two workers that read the log."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import structlog

from agentbus_redis.bus.events import LogEntry, parse_log_entry
from agentbus_redis.observability.logging import debug_enabled
from agentbus_redis.observability.tracing import trace_id_of
from agentbus_redis.runtime.codec import decode_entry
from agentbus_redis.runtime.consumer import Poison
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.wire import field_or_none

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class DecodedLogBatch:
    """A batch of log entries, decoded: the good records in order, the poison ones, counts by type."""

    records: list[tuple[StreamEntry, LogEntry]] = field(default_factory=list)
    poison: dict[str, Poison] = field(default_factory=dict)
    consumed: Counter[str] = field(default_factory=Counter)


def decode_log_batch(entries: list[StreamEntry]) -> DecodedLogBatch:
    """Decode every log entry of a batch (the normalization and transcript workers read the same log)."""
    batch = DecodedLogBatch()
    debug = debug_enabled()
    for entry in entries:
        record = decode_entry(entry, parse_log_entry)
        if isinstance(record, Poison):
            batch.consumed["invalid"] += 1
            batch.poison[entry.entry_id] = record
            continue
        batch.consumed[record.message.type] += 1
        if debug:
            log.debug(
                "log_entry",
                session_id=record.session_id,
                seq=record.seq,
                uuid=field_or_none(record.message, "uuid"),
                trace_id=trace_id_of(record.traceparent),
            )
        batch.records.append((entry, record))
    return batch
