"""The normalization worker: owner of log shards; publishes each session's next API request.

It keeps every session's history in memory (``SessionHistory``, appended per log entry), and when a
session is waiting for the model builds the request with the shared/ pipeline, checks it with
``validate_api_request`` and writes it — the per-session request key and a ``requests`` notice — in
the same atomic script as the XACK. A request that fails validation is never published: it goes to
the requests dead-letter stream as an alarm. Requests are built by a per-session ``RequestBuilder``:
the turns that are over are normalized and validated once, each request only the turns since
(``normalize/incremental.py``; exactly the full pipeline's result).

After a restart (or a shard takeover, or a redelivery) a session's history is rebuilt once from its
own event stream, up to the entry being processed; entries apply by ``seq`` so nothing applies twice.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import orjson
import redis.asyncio as aioredis
import structlog

from agentbus_redis.bus.events import LogEntry, RequestReady, parse_log_entry
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.clock import Clock, epoch_ms, utc_now
from agentbus_redis.errors import AgentbusError
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.normalize import NormalizeOptions
from agentbus_redis.normalize.incremental import BuiltRequest, RequestBuilder
from agentbus_redis.normalize.pipeline import NormalizedRequest
from agentbus_redis.normalize.thinking_models import open_turn_thinking_models
from agentbus_redis.observability import metrics
from agentbus_redis.observability.tracing import continue_trace
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.consumer import BatchHandler, BatchOutcome, Output
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.log_batch import decode_log_batch

log = structlog.get_logger(__name__)

SENDER_FITS_THINKING = NormalizeOptions(thinking_enabled=None, results_in_call_order=True)
"""The model worker sets ``thinking`` and fits it to the open turn (``build_model_params``, M1.6, API §1.10):
the requests published here keep the open turn's signed thinking byte-identical, so a tool loop passes the
previous reply's thinking back as the API requires when thinking is on. A reply's tool results go in the
order of its calls (they may complete in any order, in several tool pools: tools/pools.py)."""


@dataclass(slots=True)
class PublishedRequest:
    session_id: str
    seq: int
    result: NormalizedRequest
    traceparent: str | None
    ingress_id: str | None = None
    thinking_models: list[str] = field(default_factory=list)
    """The models whose thinking the open turn replays (``open_turn_thinking_models``)."""
    built: BuiltRequest | None = None
    """What the builder returned: it encodes the request's messages reusing its prefix's JSON."""
    repair_counts: dict[str, int] = field(default_factory=dict)
    """``result.report.counts``, counted once: the stats, the metrics and the request key all use it."""


@dataclass(slots=True)
class RejectedRequest:
    session_id: str
    seq: int
    reason: str
    detail: str
    request: object


@dataclass(slots=True)
class _Session:
    """What the normalizer keeps per session: its history and its request builder (cached prefix)."""

    history: SessionHistory
    builder: RequestBuilder


@dataclass(slots=True)
class NormalizationStats:
    """Counters for the metrics layer."""

    published: int = 0
    rejected: int = 0
    evicted: int = 0
    spliced: int = 0
    """Requests built from a session's cached prefix (``normalize/incremental.py``)."""
    repairs: dict[str, int] = field(default_factory=dict)


class NormalizationWorker:
    """Builds the batch handler of each owned log shard."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        options: NormalizeOptions | None = None,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        now_ms: Callable[[], int] = epoch_ms,
        max_sessions: int,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.options = options if options is not None else SENDER_FITS_THINKING
        self.clock = clock
        self.ids = ids
        self.now_ms = now_ms
        self.max_sessions = max_sessions
        self.histories: OrderedDict[str, _Session] = OrderedDict()
        """Least recently touched first; beyond ``max_sessions`` the oldest are dropped (and rebuilt from
        the session's event stream if it comes back, as after a restart)."""
        self.stats = NormalizationStats()

    def handler_for(self, shard: int, epoch: int) -> BatchHandler:
        async def handle(batch: list[StreamEntry]) -> BatchOutcome:
            return await self.handle(batch)

        return handle

    def forget_shard(self, shard: int) -> None:
        """Drop the histories of a shard this worker no longer owns."""
        for session in [s for s in self.histories if self.topology.names.shard_of(s) == shard]:
            del self.histories[session]

    async def handle(self, entries: list[StreamEntry]) -> BatchOutcome:
        batch = decode_log_batch(entries)
        poison, decoded, consumed = batch.poison, batch.records, batch.consumed
        await self._load_histories(decoded)
        touched: dict[str, tuple[str | None, str | None]] = {}
        for _, record in decoded:
            history = self.histories[record.session_id].history
            self.histories.move_to_end(record.session_id)
            if history.apply(record):
                touched[record.session_id] = (record.traceparent, record.ingress_id)
        published: list[PublishedRequest] = []
        rejected: list[RejectedRequest] = []
        for session, (traceparent, ingress_id) in touched.items():
            state = self.histories[session]
            history = state.history
            if not history.needs_request():
                continue
            # The request continues the trace of the entry that completed it.
            span = continue_trace(
                traceparent, on_invalid=lambda _error: metrics.record_traceparent_invalid("normalization")
            )
            outcome = self._build(state, span.traceparent)
            if isinstance(outcome, PublishedRequest):
                outcome.ingress_id = ingress_id
                published.append(outcome)
                log.info(
                    "request_published",
                    session_id=session,
                    seq=outcome.seq,
                    messages=len(outcome.result.request["messages"]),
                    trace_id=span.trace_id,
                    span_id=span.span_id,
                )
            else:
                rejected.append(outcome)
            history.mark_published()
        self._evict()
        outputs = [self._notice(request) for request in published]
        outputs += [self._alarm(request) for request in rejected]
        stream = entries[0].stream if entries else "log"
        metrics.record_consumed("normalization", stream, consumed)
        if poison:
            metrics.record_dead_lettered("normalization", stream, Counter(p.reason for p in poison.values()))
        if published:
            metrics.record_produced("normalization", "requests", {"request_ready": len(published)})
        origins = [metrics.entry_id_ms(request.ingress_id) for request in published if request.ingress_id]

        def write(calls: KeyCalls) -> None:
            self._write(calls, published)

        outcome_ = BatchOutcome(outputs=outputs, write=write, poison=poison)
        # Published once the consumer's pipeline ran; counted here, where the batch is decided.
        metrics.record_requests_published(len(published))
        metrics.observe_end_to_end("request_published", origins)
        return outcome_

    def _evict(self) -> None:
        """Keep at most ``max_sessions`` histories in memory (the batch's own sessions are the newest)."""
        while len(self.histories) > self.max_sessions:
            self.histories.popitem(last=False)
            self.stats.evicted += 1

    async def _load_histories(self, decoded: list[tuple[StreamEntry, LogEntry]]) -> None:
        """Rebuild (once) the history of every session that is new here, whose entries are redelivered, or
        whose cached history is not right before the batch's first entry of it (an entry of the session
        never reached this worker: the per-session sequence check of ecosystem.md §5)."""
        first_seq: dict[str, int] = {}
        for entry, record in decoded:
            session = record.session_id
            if session not in first_seq:
                first_seq[session] = record.seq
                cached = self.histories.get(session)
                if cached is not None and cached.history.applied_seq < record.seq - 1:
                    log.warning(
                        "history_gap",
                        session_id=session,
                        applied_seq=cached.history.applied_seq,
                        seq=record.seq,
                        entry_id=entry.entry_id,
                    )
                    del self.histories[session]
            if entry.delivery_count > 1:
                self.histories.pop(session, None)
        missing = [session for session in first_seq if session not in self.histories]
        if not missing:
            return
        pipe = self.redis.pipeline(transaction=False)
        for session in missing:
            pipe.xrange(self.topology.session_events(session))
        replies = await pipe.execute()
        for session, rows in zip(missing, replies, strict=True):
            history = SessionHistory(session)
            for _, fields in rows:
                record = parse_log_entry(fields[b"data"])
                if record.seq >= first_seq[session]:
                    break
                history.apply(record)
            history.mark_published()
            builder = RequestBuilder(options=self.options, clock=self.clock, ids=self.ids)
            self.histories[session] = _Session(history, builder)

    def _build(self, state: _Session, traceparent: str | None) -> PublishedRequest | RejectedRequest:
        history = state.history
        try:
            built = state.builder.build(history.messages)
        except AgentbusError as error:
            metrics.record_request_rejected([type(error).__name__])
            return RejectedRequest(history.session_id, history.applied_seq, type(error).__name__, str(error), None)
        result, violations = built.result, built.violations
        self.stats.spliced += built.spliced
        if violations:
            metrics.record_request_rejected(v.rule for v in violations)
            detail = "; ".join(f"{v.rule}@{v.message_index}.{v.block_index}: {v.detail}" for v in violations[:10])
            return RejectedRequest(history.session_id, history.applied_seq, "invalid_request", detail, result.request)
        repair_counts = result.report.counts
        for kind, count in repair_counts.items():
            self.stats.repairs[kind] = self.stats.repairs.get(kind, 0) + count
        metrics.record_repair_counts(repair_counts)
        self.stats.published += 1
        return PublishedRequest(
            history.session_id,
            history.applied_seq,
            result,
            traceparent,
            thinking_models=open_turn_thinking_models(history.messages),
            built=built,
            repair_counts=repair_counts,
        )

    def _notice(self, request: PublishedRequest) -> Output:
        notice = RequestReady(
            session_id=request.session_id,
            seq=request.seq,
            key=self.topology.request(request.session_id),
            message_count=len(request.result.request["messages"]),
            traceparent=request.traceparent,
        )
        return Output(self.topology.requests_for(request.session_id), entry_fields(notice), 100_000)

    def _alarm(self, request: RejectedRequest) -> Output:
        self.stats.rejected += 1
        log.error(
            "request_rejected",
            session_id=request.session_id,
            seq=request.seq,
            reason=request.reason,
            detail=request.detail,
        )
        fields = {
            "session_id": request.session_id.encode(),
            "seq": str(request.seq).encode(),
            "reason": request.reason.encode(),
            "detail": request.detail.encode(),
            "request": orjson.dumps(request.request),
        }
        return Output(self.topology.names.dead_letter_stream(self.topology.requests_for(request.session_id)), fields)

    def _write(self, calls: KeyCalls, published: list[PublishedRequest]) -> None:
        for request in published:
            body = {
                "session_id": request.session_id,
                "seq": request.seq,
                "request": _encodable_request(request),
                "repairs": request.repair_counts,
            }
            if request.thinking_models:
                body["thinking_models"] = request.thinking_models
            calls.add("SET", self.topology.request(request.session_id), orjson.dumps(body))


def _encodable_request(request: PublishedRequest) -> object:
    """The request to encode, its messages already JSON (an ``orjson.Fragment``, written as is): the builder
    encodes only what follows its cached prefix (``BuiltRequest.messages_json``), the same bytes as
    ``orjson.dumps`` of the whole list, which grows with the session."""
    body = request.result.request
    if request.built is None:
        return body
    # "messages" keeps its place in the dict: the key order, so the bytes, are those of ``body``.
    return {**body, "messages": orjson.Fragment(request.built.messages_json(orjson.dumps))}
