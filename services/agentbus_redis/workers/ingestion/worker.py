"""The ingestion worker: owner of ingress shards, only writer of the canonical log.

Per batch (one shard, in stream order) it takes the ledgers of the sessions in the batch from its cache
(loading the missing ones from Redis, see ``ledger_cache.py``), drops entries whose idempotency key was
applied before, applies the rest through :class:`SessionLedger` (pure rules in ``bus/ledger.py``),
and writes in ONE atomic script together with the XACK: the log entries (shard log + the session's own
event stream), tool jobs, the ledgers, the applied keys and the sets tool workers consult (answered calls,
retracted messages). A crash at any point therefore either applied a batch completely or not at all:
nothing lost, nothing duplicated. The cache keeps a batch's ledgers only once that script succeeded.

Before anything is applied, an entry passes the door: its size (``too_large``), its session id
(``invalid_session_id``), its shard (``wrong_shard``) and, for what only workers may write, the workers'
authenticator (``forged_internal_event``, bus/internal_events.py); each refusal is a dead letter.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import NamedTuple

import redis.asyncio as aioredis
import structlog

from agentbus_redis.approvals.records import ApprovalContinuation
from agentbus_redis.bus.events import IngressEnvelope, StreamEvent, ToolJob, parse_ingress
from agentbus_redis.bus.ingress_limits import TOO_LARGE, entry_size_problem
from agentbus_redis.bus.internal_events import (
    AUTH_FIELD,
    FORGED_INTERNAL_EVENT,
    forged_internal_problem,
    idempotency_slot,
    is_authentic,
)
from agentbus_redis.bus.interrupts import InterruptMark, format_interrupt_mark, stronger_reason
from agentbus_redis.bus.ledger import Dropped, LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.bus.live_reply import LIVE_REPLY_MAXLEN, LIVE_REPLY_TTL_MS, LiveDeltas
from agentbus_redis.clock import Clock, epoch_ms, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.observability import metrics
from agentbus_redis.observability.logging import debug_enabled
from agentbus_redis.observability.tracing import continue_trace
from agentbus_redis.runtime.codec import DATA_FIELD, decode_entry, entry_fields, signed_entry_fields
from agentbus_redis.runtime.consumer import BatchHandler, BatchOutcome, Output, Poison
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.session_ids import session_id_problem
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.ingestion_hooks import AgentBatch, IngestionAgentHooks
from agentbus_redis.tools.pools import DEFAULT_POOL, ToolRoutes, split_by_pool
from agentbus_redis.views.states import SESSION_STATES, session_state
from agentbus_redis.workers.ingestion.ledger_cache import (
    MAX_SEEN_KEYS_PER_SESSION,
    SESSIONS_TOUCH_INTERVAL_MS,
    CachedLedger,
    LedgerCache,
    dump_state,
    encode_event,
    load_state,
    replies_to_restore,
    restore_closed_calls,
    restore_reply_events,
)

log = structlog.get_logger(__name__)

SESSION_EVENTS_MAXLEN = None
"""The per-session event stream is the session's canonical history: never trimmed."""

INTERRUPT_TTL_MS = 24 * 3600 * 1000

_LIVE_DELTA = ("live", "live_delta")
_TOOL_JOB = ("tool_jobs", "tool_job")


def entry_time_ms(entry_id: str) -> int:
    """The millisecond timestamp Redis put in a stream entry id."""
    return int(entry_id.partition("-")[0])


class _Decoded(NamedTuple):
    """An admitted ingress entry, ready to apply. (A named tuple: one is made per entry, at half the cost
    of a frozen dataclass.)"""

    entry: StreamEntry
    envelope: IngressEnvelope
    traceparent: str
    authenticated: bool
    """It carries a valid worker authenticator (bus/internal_events.py)."""
    key_slot: str
    """Where its idempotency key is remembered (``idempotency_slot``): taken once, read twice."""


@dataclass(slots=True)
class _Batch:
    """What one batch will write."""

    outputs: list[Output] = field(default_factory=list)
    poison: dict[str, Poison] = field(default_factory=dict)
    ledgers: dict[str, CachedLedger] = field(default_factory=dict)
    changed: set[str] = field(default_factory=set)
    """Sessions whose stored state JSON changed (a content delta only adds to its reply's event list)."""
    stuck_checked: set[str] = field(default_factory=set)
    """Sessions a stuck-turn sweep was applied to: their stuck-at score is rewritten."""
    applied_keys: dict[str, list[str]] = field(default_factory=dict)
    closed: dict[str, list[str]] = field(default_factory=dict)
    retracted: dict[str, list[str]] = field(default_factory=dict)
    interrupts: dict[str, InterruptMark] = field(default_factory=dict)
    """Sessions interrupted in this batch: when (the last) and why (the strongest reason), bus/interrupts.py."""
    live: dict[str, LiveDeltas] = field(default_factory=dict)
    """Per session, the text deltas applied in this batch (bus/live_reply.py), coalesced."""
    dropped: list[tuple[str, Dropped]] = field(default_factory=list)
    produced: dict[tuple[str, str], int] = field(default_factory=dict)
    """(stream family, event type) → entries written. (Plain dicts count the batch's entries: ``Counter`` ``+= 1``
    cost ~0.8 µs against ~0.3 µs, once or twice per entry.)"""
    agents: AgentBatch = field(default_factory=lambda: AgentBatch(None))
    """Sub-agents: child entries to relay to parents, parents whose children to cancel."""
    tool_jobs: list[ToolJob] = field(default_factory=list)
    approval_jobs: list[ApprovalContinuation] = field(default_factory=list)
    """Jobs to write to their tools' pools once the batch is applied (:meth:`IngestionWorker._dispatch`)."""


_UNCHECKED = Poison("unchecked")
"""A session not yet at the door this batch (``IngestionWorker._admit``)."""


@dataclass(slots=True)
class _SessionWork:
    """One session's part of a batch as its entries are applied (looked up once per session, not per entry)."""

    ledger: SessionLedger
    seen: set[str]
    """Its applied idempotency keys known to this batch (``IngestionWorker._load``)."""
    applied: list[str] | None = None
    """The keys this batch applies (``_Batch.applied_keys``), once one is."""
    live: LiveDeltas | None = None
    """Its live deltas this batch (``_Batch.live``), once one is added."""


class IngestionWorker:
    """Builds the batch handler of each owned ingress shard."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        tool_deadline_ms: int,
        internal_key: bytes,
        stuck_bound_ms: int = 900_000,
        max_entry_bytes: int,
        idempotency_ttl_ms: int = 0,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        now_ms: Callable[[], int] = epoch_ms,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.tool_deadline_ms = tool_deadline_ms
        self.stuck_bound_ms = stuck_bound_ms
        """How long a session's wait may make no progress (past its owner's deadline) before the stuck-turn
        sweep ends it (bus/stuck_turns.py)."""
        self.internal_key = internal_key
        """The worker secret internal events are authenticated with (bus/internal_events.py)."""
        self.max_entry_bytes = max_entry_bytes
        self.idempotency_ttl_ms = idempotency_ttl_ms
        """How long a session's applied idempotency keys outlive its last activity (0: forever). A producer
        retry later than that is applied again."""
        self.clock = clock
        self.ids = ids
        self.now_ms = now_ms
        self.dropped_total = 0
        self.cache = LedgerCache()
        self.agents: IngestionAgentHooks | None = None
        """Sub-agents (subagents): set by the runtime; None relays nothing."""
        self.tool_routes: Callable[[], Awaitable[ToolRoutes]] | None = None
        """Which pool runs each tool (the live tool catalog, tools/pools.py); None: every job to the default pool."""

    def _invalid_traceparent(self, _error: Exception) -> None:
        metrics.record_traceparent_invalid("ingestion")

    def handler_for(self, shard: int, epoch: int) -> BatchHandler:
        # A new lease: the previous owner may have changed the shard's ledgers since we last held it.
        self.cache.forget_shard(shard)

        async def handle(batch: list[StreamEntry]) -> BatchOutcome:
            return await self.handle(shard, batch)

        return handle

    def forget_shard(self, shard: int) -> None:
        """The shard was released (``LaneWorker`` ``on_release``): its next owner will change its ledgers."""
        self.cache.forget_shard(shard)

    async def handle(self, shard: int, entries: list[StreamEntry]) -> BatchOutcome:
        batch = _Batch(agents=AgentBatch(self.agents))
        decoded: list[_Decoded] = []
        consumed: dict[str, int] = {}
        debug = debug_enabled()
        on_invalid = self._invalid_traceparent
        doors: dict[str, Poison | None] = {}
        for entry in entries:
            envelope = self._admit(shard, entry, doors)
            if isinstance(envelope, Poison):
                consumed["invalid"] = consumed.get("invalid", 0) + 1
                batch.poison[entry.entry_id] = envelope
                continue
            kind = envelope.payload.type
            consumed[kind] = consumed.get(kind, 0) + 1
            # Continue the producer's trace (or start one): every log entry and tool job of this
            # envelope carries ingestion's span as its parent.
            span = continue_trace(envelope.traceparent, on_invalid=on_invalid)
            if debug:
                log.debug(
                    "ingress_entry",
                    session_id=envelope.session_id,
                    entry_id=entry.entry_id,
                    type=envelope.payload.type,
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                )
            proof = entry.fields.get(AUTH_FIELD)
            authenticated = proof is not None and is_authentic(self.internal_key, entry.fields[DATA_FIELD], proof)
            key_slot = idempotency_slot(envelope.idempotency_key, authenticated=authenticated)
            decoded.append(_Decoded(entry, envelope, span.traceparent, authenticated, key_slot))
        seen = await self._load(shard, batch, decoded)
        # Per session, looked up once a batch: its ledger, its known keys, and (once one is applied) the list
        # of its keys this batch applies and its live deltas.
        sessions: dict[str, _SessionWork] = {}
        for item in decoded:
            entry, envelope = item.entry, item.envelope
            session = envelope.session_id
            work = sessions.get(session)
            if work is None:
                work = sessions[session] = _SessionWork(batch.ledgers[session].ledger, seen[session])
            ledger = work.ledger
            # Checked before the key is taken: a forgery must not use up the key of the real event.
            if not item.authenticated and (forged := forged_internal_problem(envelope, ledger.state.pending)):
                batch.poison[entry.entry_id] = Poison(FORGED_INTERNAL_EVENT, f"session {session}: {forged}")
                continue
            key = item.key_slot
            if key in work.seen:
                batch.dropped.append((session, Dropped("duplicate_key", key)))
                continue
            # Deadlines are measured on the entry's own clock (its id), so a replayed batch decides the same.
            at_ms = entry_time_ms(entry.entry_id)
            out = ledger.apply(envelope, now_ms=at_ms, ingress_id=entry.entry_id, traceparent=item.traceparent)
            invalid = out.invalid
            if invalid is None or out.entries or out.tool_jobs:
                # Bad input that changed nothing does not use up its key: the producer's corrected retry
                # under the same key is applied, not dropped as a duplicate.
                work.seen.add(key)
                if work.applied is None:
                    work.applied = batch.applied_keys[session] = []
                work.applied.append(key)
            self._collect(batch, session, out)
            payload = envelope.payload
            batch.agents.observe(session, payload, out, at_ms=at_ms)
            # The class itself: a failing isinstance against a pydantic model costs ~0.25 µs (payload classes
            # have no subclasses).
            if type(payload) is StreamEvent and invalid is None and not out.dropped:
                # The reply's text as it streams, for watchers (bus/live_reply.py), in this batch's write.
                live = work.live
                if live is None:
                    live = work.live = batch.live[session] = LiveDeltas()
                if live.add(payload.request_id, payload.event, after_seq=ledger.state.seq):
                    batch.produced[_LIVE_DELTA] = batch.produced.get(_LIVE_DELTA, 0) + 1
            if out.state_changed:
                batch.changed.add(session)
            if out.stuck_checked:
                batch.stuck_checked.add(session)
            if out.stuck_ended is not None:
                metrics.record_stuck_ended(out.stuck_ended)
                log.warning("stuck_turn_ended", session_id=session, waiting_for=out.stuck_ended)
            if invalid is not None:
                batch.poison[entry.entry_id] = Poison(out.invalid_reason, invalid)
        if batch.tool_jobs or batch.approval_jobs:
            await self._dispatch(batch)
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
            outputs=batch.outputs,
            write=lambda calls: self._write_state(calls, shard, batch),
            poison=batch.poison,
            on_settled=lambda: self._settled(shard, batch),
        )

    def _settled(self, shard: int, batch: _Batch) -> None:
        """The batch is committed: its ledgers may be cached, its agent work relayed."""
        self.cache.put_back(shard, batch.ledgers)
        batch.agents.settled()

    def _admit(self, shard: int, entry: StreamEntry, doors: dict[str, Poison | None]) -> IngressEnvelope | Poison:
        """The entry's envelope if it may enter this shard's ledgers; else why not (checked before it is
        parsed: its size; after: its session id and shard, once a batch per session — ``doors``)."""
        raw = entry.fields.get(DATA_FIELD)
        if raw is not None and (too_large := entry_size_problem(len(raw), self.max_entry_bytes)) is not None:
            return Poison(TOO_LARGE, f"{entry.stream} {entry.entry_id}: {too_large}")
        envelope = decode_entry(entry, parse_ingress)
        if isinstance(envelope, Poison):
            return envelope
        session = envelope.session_id
        door = doors.get(session, _UNCHECKED)
        if door is _UNCHECKED:
            door = doors[session] = self._door(shard, session)
        if door is None:
            return envelope
        if door.reason == "invalid_session_id":
            return Poison(door.reason, f"{entry.stream} {entry.entry_id}: {door.detail}")
        return door

    def _door(self, shard: int, session: str) -> Poison | None:
        """Why a session's entries may not enter this shard's ledgers (its id, its shard), or None."""
        if (problem := session_id_problem(session)) is not None:
            return Poison("invalid_session_id", f"{session!r}: {problem}")
        if self.topology.names.shard_of(session) != shard:
            return Poison("wrong_shard", f"session {session} does not belong to ingress shard {shard}")
        return None

    async def _load(self, shard: int, batch: _Batch, decoded: list[_Decoded]) -> dict[str, set[str]]:
        """Take the ledgers of the batch's sessions from the cache or Redis, and return per session the
        applied idempotency keys it knows of: all of them when the cache holds the session's set, else
        those of this batch's keys that Redis has. No round trip when every session is cached with its
        keys; one otherwise; two when a loaded session has earlier keys or a reply to rebuild."""
        keys_by_session: dict[str, list[str]] = {}
        redelivered: set[str] = set()
        for item in decoded:
            session = item.envelope.session_id
            keys = keys_by_session.get(session)
            if keys is None:
                keys = keys_by_session[session] = []
            keys.append(item.key_slot)
            if item.entry.delivery_count > 1:
                redelivered.add(session)
        seen: dict[str, set[str]] = {}
        missing: list[str] = []
        remote: list[str] = []
        for session in keys_by_session:
            cached = self.cache.take(shard, session)
            # An entry seen before may belong to a batch whose outcome is unknown: trust only Redis.
            if cached is None or session in redelivered:
                missing.append(session)
                continue
            batch.ledgers[session] = cached
            if cached.seen is not None:
                seen[session] = cached.seen
            else:
                remote.append(session)
        if not missing and not remote:
            return seen
        reads = KeyCalls()
        for session in (*remote, *missing):
            reads.add("SMISMEMBER", self.topology.seen_keys(session), *keys_by_session[session])
        for session in missing:
            reads.add("GET", self.topology.ledger(session))
            reads.add("SCARD", self.topology.seen_keys(session))
            reads.add("SMEMBERS", self.topology.answered(session))
        replies = await reads.read(self.redis)
        for session, flags in zip((*remote, *missing), replies, strict=False):
            seen[session] = {key for key, flag in zip(keys_by_session[session], flags, strict=True) if flag}
        loaded = replies[len(remote) + len(missing) :]
        to_restore: list[tuple[CachedLedger, str]] = []
        to_fill: list[CachedLedger] = []
        for index, session in enumerate(missing):
            raw_state, applied, closed = loaded[3 * index], int(loaded[3 * index + 1]), loaded[3 * index + 2]
            state = load_state(raw_state) if raw_state else new_ledger_state(session)
            restore_closed_calls(state, closed)
            cached = CachedLedger(
                SessionLedger(
                    state,
                    tool_deadline_ms=self.tool_deadline_ms,
                    stuck_bound_ms=self.stuck_bound_ms,
                    clock=self.clock,
                    ids=self.ids,
                )
            )
            batch.ledgers[session] = cached
            to_restore += [(cached, request_id) for request_id in replies_to_restore(state)]
            if applied == 0:
                cached.seen = seen[session]  # complete: Redis has no key of this session yet
            elif applied <= MAX_SEEN_KEYS_PER_SESSION:
                to_fill.append(cached)
        if to_restore or to_fill:
            # Replies first, then key sets: the replies are read back in that order.
            more = KeyCalls()
            for cached, request_id in to_restore:
                more.add("LRANGE", self.topology.reply_events(cached.ledger.state.session_id, request_id), 0, -1)
            for cached in to_fill:
                more.add("SMEMBERS", self.topology.seen_keys(cached.ledger.state.session_id))
            replies = await more.read(self.redis)
            for (cached, request_id), raw_events in zip(to_restore, replies, strict=False):
                restore_reply_events(cached, request_id, raw_events)
            for cached, members in zip(to_fill, replies[len(to_restore) :], strict=True):
                session = cached.ledger.state.session_id
                cached.seen = {member.decode() for member in members}
                # The batch's own keys already found applied stay so (same set, read later).
                seen[session] = cached.seen
        return seen

    def _collect(self, batch: _Batch, session: str, out: LedgerOutput) -> None:
        if out.entries:  # most stream events log nothing
            log_stream = self.topology.log_for(session)
            events_stream = self.topology.session_events(session)
            for entry in out.entries:
                fields = entry_fields(entry)
                batch.outputs.append(Output(log_stream, fields))
                batch.outputs.append(Output(events_stream, fields, SESSION_EVENTS_MAXLEN))
                produced = ("log", entry.message.type)
                batch.produced[produced] = batch.produced.get(produced, 0) + 1
        if out.tool_jobs:  # most entries hand out no work
            batch.tool_jobs += out.tool_jobs
        if out.approval_jobs:
            batch.approval_jobs += out.approval_jobs
        if out.closed_tool_use_ids:
            batch.closed.setdefault(session, []).extend(out.closed_tool_use_ids)
        if out.retracted_uuids:
            batch.retracted.setdefault(session, []).extend(out.retracted_uuids)
        if out.interrupt_tools or out.interrupt_model:
            earlier = batch.interrupts.get(session)
            reason = out.interrupt_reason if earlier is None else stronger_reason(earlier.reason, out.interrupt_reason)
            batch.interrupts[session] = InterruptMark(self.now_ms(), reason)
        if out.dropped:  # rare: no generator made per entry
            batch.dropped.extend((session, dropped) for dropped in out.dropped)

    async def _dispatch(self, batch: _Batch) -> None:
        """Write the batch's tool jobs to the job streams of their tools' pools: a reply's calls split by pool
        (each pool's share in call order), a continuation (one pool's parked calls) whole and signed — only
        ingestion may release a parked call (§H)."""
        routes = ToolRoutes() if self.tool_routes is None else await self.tool_routes()
        for job in batch.tool_jobs:
            for pool, calls in split_by_pool(job.tool_uses, routes):
                share = job if len(calls) == len(job.tool_uses) else job.model_copy(update={"tool_uses": calls})
                batch.outputs.append(Output(self.topology.tool_jobs_for(job.session_id, pool), entry_fields(share)))
                batch.produced[_TOOL_JOB] = batch.produced.get(_TOOL_JOB, 0) + 1
        for continuation in batch.approval_jobs:
            pool = routes.pool_of(continuation.tool_uses[0].name) if continuation.tool_uses else DEFAULT_POOL
            fields = signed_entry_fields(continuation, self.internal_key)
            batch.outputs.append(Output(self.topology.tool_jobs_for(continuation.session_id, pool), fields))
            produced = ("tool_jobs", continuation.type)
            batch.produced[produced] = batch.produced.get(produced, 0) + 1

    def _write_state(self, calls: KeyCalls, shard: int, batch: _Batch) -> None:
        """Queue the batch's state writes (after its log entries and tool jobs, before the XACK)."""
        now = self.now_ms()
        touched: list[str] = []
        for session, cached in batch.ledgers.items():
            if session in batch.changed:
                calls.add("SET", self.topology.ledger(session), dump_state(cached.ledger.state))
            self._write_reply_events(calls, session, cached)
            deadline = cached.ledger.next_deadline_ms()
            if not cached.deadline_known or deadline != cached.deadline_ms:
                if deadline is None:
                    calls.add("ZREM", self.topology.deadlines(shard), session)
                else:
                    calls.add("ZADD", self.topology.deadlines(shard), deadline, session)
                cached.deadline_ms, cached.deadline_known = deadline, True
            stuck_at = cached.ledger.stuck_at_ms()
            if _stuck_score_stale(cached, stuck_at, forced=session in batch.stuck_checked):
                if stuck_at is None:
                    calls.add("ZREM", self.topology.stuck_index(shard), session)
                else:
                    calls.add("ZADD", self.topology.stuck_index(shard), stuck_at, session)
                cached.stuck_at_ms, cached.stuck_known = stuck_at, True
            self._write_listed_state(calls, shard, session, cached, now)
        for session, keys in batch.applied_keys.items():
            calls.add_members("SADD", self.topology.seen_keys(session), list(keys))
            cached = batch.ledgers[session]
            if cached.touched_ms is None or now - cached.touched_ms >= SESSIONS_TOUCH_INTERVAL_MS:
                touched.append(session)
                cached.touched_ms = now
                if self.idempotency_ttl_ms:
                    # Refreshed at most once a minute while the session is active: a quiet session's keys go.
                    calls.add("PEXPIRE", self.topology.seen_keys(session), self.idempotency_ttl_ms)
        for session, ids in batch.closed.items():
            calls.add_members("SADD", self.topology.answered(session), list(ids))
        for session, uuids in batch.retracted.items():
            calls.add_members("SADD", self.topology.retracted(session), list(uuids))
        for session, deltas in batch.live.items():
            stream = self.topology.live_reply(session)
            entries = deltas.entries()
            if not entries:
                continue
            for delta in entries:
                calls.add_xadd(stream, entry_fields(delta), LIVE_REPLY_MAXLEN)
            calls.add("PEXPIRE", stream, LIVE_REPLY_TTL_MS)
        for session, mark in batch.interrupts.items():
            calls.add("SET", self.topology.interrupt(session), format_interrupt_mark(*mark), "PX", INTERRUPT_TTL_MS)
        if touched:
            calls.add("ZADD", self.topology.sessions(shard), *(arg for session in touched for arg in (now, session)))
        for session in batch.interrupts:
            calls.add_keyless("PUBLISH", self.topology.interrupts_channel, session)
        batch.agents.write(calls)

    def _write_listed_state(self, calls: KeyCalls, shard: int, session: str, cached: CachedLedger, now: int) -> None:
        """Move the session to the console state index of its state when that changed (views/states.py). A
        ledger loaded from Redis does not know its index: it is removed from all the others once."""
        state = session_state(cached.ledger.state)
        if state == cached.listed_state:
            return
        stale = SESSION_STATES if cached.listed_state is None else (cached.listed_state,)
        for old in stale:
            if old != state:
                calls.add("ZREM", self.topology.session_state_index(shard, old), session)
        calls.add("ZADD", self.topology.session_state_index(shard, state), now, session)
        cached.listed_state = state

    def _write_reply_events(self, calls: KeyCalls, session: str, cached: CachedLedger) -> None:
        """Append the new raw events of each open reply to its list; delete the lists of finished ones.

        (The bookkeeping is updated now: if the transaction fails, this ledger is not put back in the cache.)
        """
        open_replies = cached.ledger.state.open_replies
        stored = cached.stored_replies
        if stored:
            for request_id, (reply, _) in list(stored.items()):
                if open_replies.get(request_id) is not reply:
                    calls.add("DEL", self.topology.reply_events(session, request_id))
                    del stored[request_id]
        for request_id, reply in open_replies.items():
            events = reply.events
            # What stays in ``stored`` holds this very reply (the loop above dropped the others).
            known = stored.get(request_id)
            count = 0 if known is None else known[1]
            if len(events) > count:
                key = self.topology.reply_events(session, request_id)
                calls.add_members("RPUSH", key, [encode_event(event) for event in events[count:]])
            if known is None or len(events) != count:
                stored[request_id] = (reply, len(events))


STUCK_SCORE_SLACK_MS = 1_000
"""A stuck-at score this much behind the ledger's is left as it is: a streaming reply moves it on every delta,
and a score a little early costs at most one sweep that the ledger finds not stuck (which rewrites it)."""


def _stuck_score_stale(cached: CachedLedger, stuck_at: int | None, *, forced: bool) -> bool:
    """Whether the session's score in the stuck-turn index must be written (or removed) now."""
    if forced or not cached.stuck_known or (stuck_at is None) != (cached.stuck_at_ms is None):
        return True
    if stuck_at is None or cached.stuck_at_ms is None:
        return False
    return stuck_at < cached.stuck_at_ms or stuck_at - cached.stuck_at_ms >= STUCK_SCORE_SLACK_MS
