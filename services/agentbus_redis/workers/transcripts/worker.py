"""The transcript worker: owner of log shards; appends every session to its Claude Code JSONL file.

Per batch it records each session's new messages through :class:`TranscriptStore` (R7.7/R7.8 chain,
de-dup by uuid so a redelivered entry is a no-op), removes the lines of tombstoned messages (R6.3,
R7.13), and returns only once every line is durable (group-committed fsync); the consumer then acks.
With ``AGENTBUS_TRANSCRIPT_FORMAT=pi`` it also keeps a pi session file per session (:mod:`pi_mirror`).
A crash before the ack redelivers the batch and the uuid de-dup makes the transcript effectively-once.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.kinds import Message, TombstoneMessage
from agentbus_redis.observability import metrics
from agentbus_redis.runtime.codec import DATA_FIELD
from agentbus_redis.runtime.consumer import BatchHandler, BatchOutcome, Poison
from agentbus_redis.session_ids import session_id_problem
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.transcript_files.logged_wire import LoggedWires, logged_message_wire
from agentbus_redis.transcript_files.pi_mirror import PiMirror
from agentbus_redis.transcript_files.store import TranscriptStore
from agentbus_redis.wire import field_or_none
from agentbus_redis.workers.log_batch import decode_log_batch

log = structlog.get_logger(__name__)


@dataclass(slots=True)
class TranscriptStats:
    """Counters for the metrics layer."""

    lines_written: int = 0
    duplicates_skipped: int = 0
    lines_removed: int = 0


class TranscriptWorker:
    """Builds the batch handler of each owned log shard."""

    def __init__(
        self,
        store: TranscriptStore,
        *,
        cwd: str,
        pi_mirror: PiMirror | None = None,
        on_new_session: Callable[[str], Awaitable[None]] | None = None,
    ) -> None:
        self.store = store
        self.cwd = cwd
        self.pi_mirror = pi_mirror
        """``AGENTBUS_TRANSCRIPT_FORMAT=pi``: also keep each session as a pi session file."""
        self.on_new_session = on_new_session
        """Called once per session (per process) before its first lines: a sub-agent's ``.meta.json`` (A4.1)."""
        self._seen_sessions: set[str] = set()
        self.stats = TranscriptStats()

    def handler_for(self, shard: int, epoch: int) -> BatchHandler:
        return self.handle

    async def handle(self, entries: list[StreamEntry]) -> BatchOutcome:
        batch = decode_log_batch(entries)
        poison, consumed = batch.poison, batch.consumed
        by_session: dict[str, list[LogEntry]] = {}
        # Each session id is checked once a batch, not once an entry (a batch holds a few entries a session).
        invalid: dict[str, str] = {}
        for entry, record in batch.records:
            session = record.session_id
            if (records := by_session.get(session)) is not None:
                records.append(record)
                continue
            problem = invalid.get(session)
            if problem is None and (problem := session_id_problem(session)) is not None:
                invalid[session] = problem
            if problem is not None:
                # Ingestion refuses such ids; a log written before it did must not fail the batch forever.
                poison[entry.entry_id] = Poison("invalid_session_id", f"{session!r}: {problem}")
                continue
            by_session[session] = [record]
        # Each message's wire object as logged: its line is built from it, not from a dump of the model.
        wires: LoggedWires = {
            id(record.message): (record.message, wire)
            for entry, record in batch.records
            if (wire := logged_message_wire(entry.fields[DATA_FIELD])) is not None
        }
        before = (self.stats.lines_written, self.stats.duplicates_skipped, self.stats.lines_removed)
        started = time.perf_counter()
        await self._persist_all(by_session, wires)
        durable_s = time.perf_counter() - started
        stream = entries[0].stream if entries else "log"
        metrics.record_consumed("transcripts", stream, consumed)
        if poison:
            metrics.record_dead_lettered("transcripts", stream, Counter(p.reason for p in poison.values()))
        if by_session:
            metrics.record_transcript_append(
                lines=self.stats.lines_written - before[0],
                durable_s=durable_s,
                removed=self.stats.lines_removed - before[2],
            )
            metrics.record_duplicates("transcripts", "uuid", self.stats.duplicates_skipped - before[1])
            # Ingestion's share of the end-to-end latency (log entry id minus ingress id). Observed here
            # only, not by normalization (which reads the same entries), so each entry counts once.
            metrics.observe_stage_delays(
                "log_written",
                [
                    metrics.entry_id_ms(entry.entry_id) - metrics.entry_id_ms(record.ingress_id)
                    for entry, record in batch.records
                    if record.ingress_id
                ],
            )
            metrics.observe_end_to_end(
                "transcript_durable",
                [
                    metrics.entry_id_ms(record.ingress_id)
                    for records in by_session.values()
                    for record in records
                    if record.ingress_id
                ],
            )
        log.info(
            "batch_handled", stream=stream, size=len(entries), sessions=len(by_session), durable_s=round(durable_s, 6)
        )
        return BatchOutcome(poison=poison)

    async def _persist_all(self, by_session: dict[str, list[LogEntry]], wires: LoggedWires) -> None:
        """Write every session's lines, then wait until they are all durable. Sessions are independent files:
        their writes and syncs overlap (one shared ``syncfs`` round, or concurrent fsyncs)."""
        pending: list[asyncio.Future[None]] = []
        others: list[tuple[str, list[LogEntry]]] = []
        failure: Exception | None = None
        for session, records in by_session.items():
            try:
                if not self._record_ready(session, records, pending, wires):
                    others.append((session, records))
            except Exception as error:  # as a failed task of the gather below: the other sessions still write
                failure = failure or error
        if failure is not None:
            raise failure
        if others:
            await asyncio.gather(*(self._persist(session, records, wires) for session, records in others))
        for future in pending:
            await future

    def _record_ready(
        self, session: str, records: list[LogEntry], pending: list[asyncio.Future[None]], wires: LoggedWires
    ) -> bool:
        """The common case done without a task per session (``TranscriptStore.record_ready``): an open session,
        one run of messages (no tombstone, one ``replayed`` flag), nothing else to do for it. False when
        ``_persist`` must do it (nothing was written)."""
        if self.pi_mirror is not None or (self.on_new_session is not None and session not in self._seen_sessions):
            return False
        replayed = records[0].replayed
        if any(isinstance(record.message, TombstoneMessage) or record.replayed != replayed for record in records):
            return False
        messages = [record.message for record in records]
        ready = self.store.record_ready(session, messages, cwd=self.cwd, recorded=replayed, wires=wires)
        if ready is None:
            return False
        result, futures = ready
        pending += futures
        self.stats.lines_written += len(result.written)
        self.stats.duplicates_skipped += len(result.skipped)
        return True

    async def _persist(self, session: str, records: list[LogEntry], wires: LoggedWires) -> None:
        if self.on_new_session is not None and session not in self._seen_sessions:
            await self.on_new_session(session)
            self._seen_sessions.add(session)
        removed_any = await self._persist_transcript(session, records, wires)
        if self.pi_mirror is not None:
            await self.pi_mirror.sync(session, self.store.session_path(session, self.cwd), rewrite=removed_any)

    async def _persist_transcript(self, session: str, records: list[LogEntry], wires: LoggedWires) -> bool:
        """Record the batch's messages and apply its tombstones; True when a line was removed."""
        removed_any = False
        run: list[Message] = []
        replayed = False
        for record in records:
            message = record.message
            if isinstance(message, TombstoneMessage):
                await self._record(session, run, wires, recorded=replayed)
                run = []
                uuid = field_or_none(message.message, "uuid")
                if isinstance(uuid, str):
                    removed = await self.store.remove(session, uuid, cwd=self.cwd)
                    self.stats.lines_removed += 1 if removed.removed else 0
                    removed_any = removed_any or bool(removed.removed)
            else:
                if record.replayed != replayed:  # a replayed recording keeps its attachments: its own run
                    await self._record(session, run, wires, recorded=replayed)
                    run, replayed = [], record.replayed
                run.append(message)
        await self._record(session, run, wires, recorded=replayed)
        return removed_any

    async def _record(self, session: str, messages: list[Message], wires: LoggedWires, *, recorded: bool) -> None:
        if not messages:
            return
        result = await self.store.record(
            session, messages, cwd=self.cwd, continue_chain=True, recorded=recorded, wires=wires
        )
        self.stats.lines_written += len(result.written)
        self.stats.duplicates_skipped += len(result.skipped)
