"""The ingestion worker: owner of ingress shards, only writer of the canonical log.

Per batch (one shard, in stream order) it loads the ledgers of the sessions in the batch, drops
entries whose idempotency key was applied before, applies the rest through :class:`SessionLedger`
(pure rules in ``shared/ledger.py``), and writes in ONE MULTI/EXEC transaction together with the
XACK: the log entries (shard log + the session's own event stream), tool jobs, the ledgers, the
applied keys and the sets tool workers consult (answered calls, retracted messages). A crash at any
point therefore either applied a batch completely or not at all: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import redis.asyncio as aioredis
import structlog
from redis.asyncio.client import Pipeline

from services.observability import metrics
from services.observability.logging import debug_enabled
from services.observability.tracing import continue_trace
from services.runtime.codec import decode_entry, entry_fields
from services.runtime.consumer import BatchHandler, BatchOutcome, Output, Poison
from services.runtime.entries import StreamEntry
from services.runtime.topology import Topology
from shared.clock import Clock, utc_now
from shared.events import IngressEnvelope, parse_ingress
from shared.ids import IdSource, random_uuid
from shared.ledger import Dropped, LedgerOutput, LedgerState, SessionLedger, new_ledger_state

log = structlog.get_logger(__name__)

SESSION_EVENTS_MAXLEN = None
"""The per-session event stream is the session's canonical history: never trimmed."""


def entry_time_ms(entry_id: str) -> int:
    """The millisecond timestamp Redis put in a stream entry id."""
    return int(entry_id.split("-", 1)[0])


@dataclass(slots=True)
class _Batch:
    """What one batch will write."""

    outputs: list[Output] = field(default_factory=list)
    poison: dict[str, Poison] = field(default_factory=dict)
    ledgers: dict[str, SessionLedger] = field(default_factory=dict)
    applied_keys: dict[str, list[str]] = field(default_factory=dict)
    closed: dict[str, list[str]] = field(default_factory=dict)
    retracted: dict[str, list[str]] = field(default_factory=dict)
    interrupts: dict[str, int] = field(default_factory=dict)
    dropped: list[tuple[str, Dropped]] = field(default_factory=list)
    produced: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(stream family, event type) → entries written."""


class IngestionWorker:
    """Builds the batch handler of each owned ingress shard."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        tool_deadline_ms: int,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        now_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.tool_deadline_ms = tool_deadline_ms
        self.clock = clock
        self.ids = ids
        self.now_ms = now_ms
        self.dropped_total = 0

    def _invalid_traceparent(self, _error: Exception) -> None:
        metrics.record_traceparent_invalid("ingestion")

    def handler_for(self, shard: int, epoch: int) -> BatchHandler:
        async def handle(batch: list[StreamEntry]) -> BatchOutcome:
            return await self.handle(shard, batch)

        return handle

    async def handle(self, shard: int, entries: list[StreamEntry]) -> BatchOutcome:
        batch = _Batch()
        decoded: list[tuple[StreamEntry, IngressEnvelope]] = []
        consumed: Counter[str] = Counter()
        debug = debug_enabled()
        for entry in entries:
            envelope = decode_entry(entry, parse_ingress)
            if isinstance(envelope, Poison):
                consumed["invalid"] += 1
                batch.poison[entry.entry_id] = envelope
            elif self.topology.names.shard_of(envelope.session_id) != shard:
                consumed[envelope.payload.type] += 1
                batch.poison[entry.entry_id] = Poison(
                    "wrong_shard", f"session {envelope.session_id} does not belong to ingress shard {shard}"
                )
            else:
                consumed[envelope.payload.type] += 1
                # Continue the producer's trace (or start one): every log entry and tool job of this
                # envelope carries ingestion's span as its parent.
                span = continue_trace(envelope.traceparent, on_invalid=self._invalid_traceparent)
                envelope = envelope.model_copy(update={"traceparent": span.traceparent})
                if debug:
                    log.debug(
                        "ingress_entry",
                        session_id=envelope.session_id,
                        entry_id=entry.entry_id,
                        type=envelope.payload.type,
                        trace_id=span.trace_id,
                        span_id=span.span_id,
                    )
                decoded.append((entry, envelope))
        seen = await self._load(batch, decoded)
        for entry, envelope in decoded:
            key = envelope.idempotency_key
            session = envelope.session_id
            if key in seen[session]:
                batch.dropped.append((session, Dropped("duplicate_key", key)))
                continue
            seen[session].add(key)
            batch.applied_keys.setdefault(session, []).append(key)
            # Deadlines are measured on the entry's own clock (its id), so a replayed batch decides the same.
            out = batch.ledgers[session].apply(
                envelope, now_ms=entry_time_ms(entry.entry_id), ingress_id=entry.entry_id
            )
            self._collect(batch, session, out)
            if out.invalid is not None:
                batch.poison[entry.entry_id] = Poison("invalid_input", out.invalid)
        for session, dropped in batch.dropped:
            log.debug("ingress_dropped", session_id=session, reason=dropped.reason, detail=dropped.detail)
        self.dropped_total += len(batch.dropped)
        stream = entries[0].stream if entries else "ingress"
        metrics.record_consumed("ingestion", stream, consumed)
        for (family, event_type), count in batch.produced.items():
            metrics.record_produced("ingestion", family, {event_type: count})
        if batch.poison:
            metrics.record_dead_lettered("ingestion", stream, Counter(p.reason for p in batch.poison.values()))
        duplicates = sum(1 for _, dropped in batch.dropped if dropped.reason == "duplicate_key")
        metrics.record_duplicates("ingestion", "idempotency_key", duplicates)
        log.info("batch_handled", stream=stream, size=len(entries), dead_lettered=len(batch.poison))
        return BatchOutcome(
            outputs=batch.outputs, write=lambda pipe: self._write_state(pipe, shard, batch), poison=batch.poison
        )

    async def _load(self, batch: _Batch, decoded: list[tuple[StreamEntry, IngressEnvelope]]) -> dict[str, set[str]]:
        """Load the ledger and the already-applied keys of every session in the batch (one round trip)."""
        keys_by_session: dict[str, list[str]] = {}
        for _, envelope in decoded:
            keys_by_session.setdefault(envelope.session_id, []).append(envelope.idempotency_key)
        sessions = list(keys_by_session)
        if not sessions:
            return {}
        pipe = self.redis.pipeline(transaction=False)
        for session in sessions:
            pipe.get(self.topology.ledger(session))
            pipe.smismember(self.topology.seen_keys(session), keys_by_session[session])
        replies = await pipe.execute()
        seen: dict[str, set[str]] = {}
        for index, session in enumerate(sessions):
            raw_state, flags = replies[2 * index], replies[2 * index + 1]
            state = (
                LedgerState.model_validate_json(raw_state, by_alias=True, by_name=False)
                if raw_state
                else new_ledger_state(session)
            )
            batch.ledgers[session] = SessionLedger(
                state, tool_deadline_ms=self.tool_deadline_ms, clock=self.clock, ids=self.ids
            )
            seen[session] = {key for key, flag in zip(keys_by_session[session], flags, strict=True) if flag}
        return seen

    def _collect(self, batch: _Batch, session: str, out: LedgerOutput) -> None:
        log_stream = self.topology.log_for(session)
        events_stream = self.topology.session_events(session)
        for entry in out.entries:
            fields = entry_fields(entry)
            batch.outputs.append(Output(log_stream, fields))
            batch.outputs.append(Output(events_stream, fields, SESSION_EVENTS_MAXLEN))
            batch.produced["log", entry.message.type] += 1
        for job in out.tool_jobs:
            batch.outputs.append(Output(self.topology.tool_jobs, entry_fields(job)))
            batch.produced["tool_jobs", "tool_job"] += 1
        if out.closed_tool_use_ids:
            batch.closed.setdefault(session, []).extend(out.closed_tool_use_ids)
        if out.retracted_uuids:
            batch.retracted.setdefault(session, []).extend(out.retracted_uuids)
        if out.interrupt_tools:
            batch.interrupts[session] = self.now_ms()
        batch.dropped.extend((session, dropped) for dropped in out.dropped)

    def _write_state(self, pipe: Pipeline, shard: int, batch: _Batch) -> None:
        now = self.now_ms()
        for session, ledger in batch.ledgers.items():
            pipe.set(self.topology.ledger(session), ledger.state.model_dump_json())
            deadline = ledger.next_deadline_ms()
            if deadline is None:
                pipe.zrem(self.topology.deadlines(shard), session)
            else:
                pipe.zadd(self.topology.deadlines(shard), {session: deadline})
        for session, keys in batch.applied_keys.items():
            pipe.sadd(self.topology.seen_keys(session), *keys)
            pipe.zadd(self.topology.sessions(), {session: now})
        for session, ids in batch.closed.items():
            pipe.sadd(self.topology.answered(session), *ids)
        for session, uuids in batch.retracted.items():
            pipe.sadd(self.topology.retracted(session), *uuids)
        for session, at_ms in batch.interrupts.items():
            pipe.set(self.topology.interrupt(session), at_ms, px=24 * 3600 * 1000)
            pipe.publish(self.topology.interrupts_channel, session)
