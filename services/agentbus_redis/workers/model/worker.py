"""The model worker: competing consumers of the request notices (group ``model`` on every shard's ``requests``
stream) that turn a session's published API request into a streamed model reply on the bus.

Per notice (a :class:`~agentbus_redis.bus.events.RequestReady` pointing at the session's stored request):

1. **One call per session.** The session's call lease (``session_lease.py``) is taken first; a notice whose
   request was superseded by a newer one of the session (the stored request's ``seq`` is higher) while it
   waited is acked unused. The notice entry is kept claimed (``XCLAIM … JUSTID``) and the lease renewed
   while the call runs, so only a dead worker's notice is reclaimed — and only once its lease expired.
2. **At most once per request.** The in-flight record (``Topology.model_inflight``) says which request the
   session's latest call answered and whether its reply is complete; it is written atomically with the
   stream's first event and with its last (``publisher.py``). A notice whose request was answered already
   (a worker died between its reply and its ack) is acked unused; a record still "streaming" is a dead
   worker's half-streamed reply: it is tombstoned (``StreamFallback``) and the request called again.
3. **The call** (``call.py``): parameters from the stored request, the session's config and the tool
   catalog (``build_model_params``); a prompt over the pre-flight blocking limit (M8.1) is answered
   ``Prompt is too long`` without a request; else the tenant's token bucket first, then stream / retry /
   fall back.
   The lease's token fences every write of the call; a lease lost mid-call (a renewal failed, or a write was
   refused) aborts the call at once and leaves the notice pending: the worker that holds the lease now, or
   the one that reclaims the notice, serves the request (tombstoning what was streamed).
4. **Interrupts** arrive on the interrupts channel (ingestion publishes every applied interrupt): the
   session's call task is cancelled, which closes the HTTP stream at once; nothing more is published (the
   interrupt already closed the turn, R10.1; ingestion drops late events of the interrupted request).
5. **Usage and cost** of a finished call are recorded per session (M10) and in the metrics (M11). The answered
   in-flight record carries the usage too, and whoever serves the session's next notice (the same request
   redelivered, or the next one) records it first, so a call whose worker died or failed to write before
   recording it is still counted, once (the usage store deduplicates by request id).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson
import redis.asyncio as aioredis
import structlog
from anthropic import AsyncAnthropic

from agentbus_redis.bus.events import AssistantReply, AttachmentNotice, RequestReady, StreamFallback
from agentbus_redis.bus.interrupts import parse_interrupt_mark
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.config.settings import ModelSettings
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.factories import create_assistant_api_error_message
from agentbus_redis.model.cost import PriceTable, price_call
from agentbus_redis.model.error_texts import PROMPT_TOO_LONG
from agentbus_redis.model.genai import error_attributes, request_attributes, response_attributes, span_name
from agentbus_redis.model.limits.max_tokens import ESCALATED_MAX_TOKENS, default_max_tokens, max_tokens_upper_limit
from agentbus_redis.model.limits.max_turns import max_turns_attachment, next_turn_count, over_max_turns
from agentbus_redis.model.limits.token_estimate import estimate_prompt_tokens
from agentbus_redis.model.limits.window import (
    OUTPUT_TOKEN_RECOVERY_MESSAGE,
    OutputLimitState,
    blocking_limit,
    context_window,
    is_blocked,
    lowered_window,
)
from agentbus_redis.model.request import ModelDefaults, build_model_params, request_body, with_max_tokens
from agentbus_redis.model.retry import ApiFailure
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.observability import model_metrics
from agentbus_redis.observability.tracing import AttributeValue, Span, WorkerTracer
from agentbus_redis.runtime.codec import decode_entry
from agentbus_redis.runtime.consumer import BatchOutcome, Poison
from agentbus_redis.runtime.ride_out import RedisUnavailable, ride_out
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.stores.usage import record_priced_usage, record_usage
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.topology import MODEL_GROUP, Topology
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.workers.model.call import CallResult, ModelCall
from agentbus_redis.workers.model.failures import error_type_label
from agentbus_redis.workers.model.publisher import SessionPublisher
from agentbus_redis.workers.model.session_lease import SessionLease, SessionLeaseLost

log = structlog.get_logger(__name__)

LEASE_POLL_INITIAL_S = 0.02
LEASE_POLL_MAX_S = 0.5
USAGE_RETRY_S = 300.0
"""How long the usage of an abandoned call's complete replies is retried (Redis restarting) before it is logged lost."""
DEFAULT_TENANT = "default"
FINAL_STATES = frozenset({"answered", "interrupted"})
"""In-flight record states that mean the request needs no call any more."""

ToolSource = Callable[[], Awaitable[Sequence[ToolDefinition]]]


class Bucket(Protocol):
    """What the worker needs of a tenant token bucket (``stores/token_bucket.py``)."""

    async def acquire(self, tenant: str, *, tokens: int) -> float: ...

    async def settle(self, tenant: str, *, estimated: int, actual: int) -> None: ...


def parse_request_notice(data: str | bytes) -> RequestReady:
    return RequestReady.model_validate_json(data, by_alias=True, by_name=False)


def request_digest(api_request: JsonObject) -> str:
    """What the request asks, for telling a request apart from one already answered."""
    return hashlib.sha256(orjson.dumps(api_request.get("messages"))).hexdigest()[:32]


def answered_already(inflight: JsonObject | None, seq: int, digest: str) -> bool:
    """The session's last call answered this request: its seq, or an identical request published again (a
    stream fallback's tombstones make the normalizer publish the same conversation once more at a later seq,
    while the call that tombstoned them answers it)."""
    if inflight is None or inflight.get("state") not in FINAL_STATES:
        return False
    answered_seq = inflight.get("seq")
    return (isinstance(answered_seq, int) and answered_seq >= seq) or inflight.get("digest") == digest


def count_recoveries(api_request: JsonObject) -> int:
    """M8.5: the "Output token limit hit" messages of the turn the request continues (after its last prompt)."""
    messages = api_request.get("messages")
    count = 0
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict) or message.get("role") != "user":
            continue
        text = _user_text(message.get("content"))
        if OUTPUT_TOKEN_RECOVERY_MESSAGE in text:
            count += 1
        elif text:
            break  # the prompt that started the turn
    return count


def _user_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def continues_tool_loop(api_request: JsonObject) -> bool:
    """The request goes on with the turn of the previous call: its last message carries only tool results
    (a new prompt starts a new turn)."""
    messages = api_request.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    content = messages[-1].get("content")
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


def entry_time_ms(entry_id: str) -> int:
    return int(entry_id.split("-", 1)[0])


def total_tokens(usage: JsonObject | None) -> int:
    """M10.4: input + cache creation + cache read + output."""
    if not usage:
        return 0
    names = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    return sum(value for name in names if isinstance(value := usage.get(name), int))


@dataclass(frozen=True, slots=True)
class TurnOutputLimits:
    """M8.5/M8.6 inputs of one call: the turn's recovery state and what rules out the escalation."""

    state: OutputLimitState
    capped_default: bool
    """M1.5 gate ``tengu_otk_slot_v1`` (``AGENTBUS_MODEL__CAPPED_DEFAULT_MAX_TOKENS``)."""
    explicit_max_tokens: bool
    """The session or the worker sets ``max_tokens`` (Claude Code: ``CLAUDE_CODE_MAX_OUTPUT_TOKENS``)."""
    escalated: int
    """The escalation's ``max_tokens``: 64 000, bounded by the model's upper limit (M1.5)."""


@dataclass(slots=True)
class _Running:
    task: asyncio.Task[CallResult]
    interrupted_at: float | None = None


@dataclass(slots=True)
class ModelWorkerStats:
    calls: int = 0
    superseded: int = 0
    already_answered: int = 0
    recovered: int = 0
    interrupted: int = 0
    lease_lost: int = 0
    blocked: int = 0


class ModelWorker:
    """Runs model calls for request notices; see the module docstring."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        consumer: str,
        settings: ModelSettings,
        client: AsyncAnthropic,
        defaults: ModelDefaults,
        tools: ToolSource,
        prices: PriceTable,
        internal_key: bytes,
        slots: JobSlots,
        keepalive_s: float,
        bucket: Bucket | None = None,
        max_deliveries: int = 5,
        tracer: WorkerTracer | None = None,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.consumer = consumer
        self.settings = settings
        self.client = client
        self.defaults = defaults
        self.tools = tools
        self.prices = prices
        self.internal_key = internal_key
        self.slots = slots
        self.keepalive_s = keepalive_s
        self.bucket = bucket
        self.max_deliveries = max_deliveries
        """The consumers' ``max_deliveries``: a notice delivered that often is dead-lettered if its call fails."""
        self.tracer = tracer if tracer is not None else WorkerTracer("model")
        self.clock = clock
        self.ids = ids
        self.stats = ModelWorkerStats()
        self._running: dict[str, _Running] = {}
        self._usage_writes: set[asyncio.Task[None]] = set()

    # -- interrupts -------------------------------------------------------------------------------------

    def interrupt_session(self, session_id: str) -> None:
        """Abort the session's call in flight (the interrupts channel said so)."""
        running = self._running.get(session_id)
        if running is not None and not running.task.done():
            running.interrupted_at = time.perf_counter()
            running.task.cancel()

    # -- the consumer's handler ------------------------------------------------------------------------

    async def handle(self, entries: list[StreamEntry]) -> BatchOutcome:
        """Start each notice's call in a slot and return once a slot is free (the calls ack their own entries)."""
        poison: dict[str, Poison] = {}
        for entry in entries:
            if self.slots.holds(entry):
                continue
            notice = decode_entry(entry, parse_request_notice)
            if isinstance(notice, Poison):
                poison[entry.entry_id] = notice
            else:
                await self.slots.start(entry, functools.partial(self._run, entry, notice))
        await self.slots.until_free()
        return BatchOutcome(ack=(), poison=poison)

    async def _run(self, entry: StreamEntry, notice: RequestReady) -> None:
        lease = SessionLease(
            self.redis,
            self.topology.model_lease(notice.session_id),
            owner=f"{self.consumer}:{uuid.uuid4().hex[:12]}",  # this job's token: the fence of its writes
            ttl_ms=self.settings.session_lease_ms,
        )
        job = asyncio.current_task()
        held = asyncio.Event()
        lost = asyncio.Event()
        keepalive = asyncio.create_task(self._keep_alive(entry, lease, held, lost, job))
        try:
            try:
                state = await self._take(lease, notice)
                if state is None:
                    self.stats.superseded += 1
                    model_metrics.record_call(self.defaults.model, "superseded")
                    return
                held.set()
                try:
                    await self._serve(entry, notice, state, lease)
                finally:
                    held.clear()
                    await lease.release()
            finally:
                keepalive.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await keepalive
        except asyncio.CancelledError:
            if job is not None and lost.is_set() and job.uncancel() == 0:
                self._lease_lost(notice, lease)  # cancelled by the keep-alive, not by a shutdown
                raise SessionLeaseLost(lease.key, lease.owner) from None
            raise
        except SessionLeaseLost:
            self._lease_lost(notice, lease)  # a fenced write was refused before a renewal noticed
            raise

    def _lease_lost(self, notice: RequestReady, lease: SessionLease) -> None:
        """The call stopped without publishing more; its notice stays pending for whoever serves it next."""
        self.stats.lease_lost += 1
        model_metrics.record_call(self.defaults.model, "lease_lost")
        log.error("session_lease_lost", session_id=notice.session_id, seq=notice.seq, lease=lease.key)

    async def _take(self, lease: SessionLease, notice: RequestReady) -> list[bytes | None] | None:
        """Take the lease and read the session's state in one round trip (the common case: nobody holds it);
        None when a newer request superseded this one while the lease was held by another call."""
        acquired, *state = await self._read_state(notice.session_id, lease)
        if acquired:
            return state
        if not await self._acquire(lease, notice):
            return None
        _, *state = await self._read_state(notice.session_id, None)
        return state

    async def _read_state(self, session: str, lease: SessionLease | None) -> list[bytes | None]:
        """[lease taken?, stored request, in-flight record, session config, interrupt time]."""
        pipe = self.redis.pipeline(transaction=False)
        if lease is not None:
            pipe.set(lease.key, lease.owner, nx=True, px=lease.ttl_ms)
        pipe.get(self.topology.request(session))
        pipe.get(self.topology.model_inflight(session))
        pipe.get(self.topology.session_config(session))
        pipe.get(self.topology.interrupt(session))
        replies: list[bytes | None] = await pipe.execute()
        return replies if lease is not None else [None, *replies]

    async def _acquire(self, lease: SessionLease, notice: RequestReady) -> bool:
        """Take the session's lease; False when a newer request of the session superseded this one meanwhile."""
        delay = LEASE_POLL_INITIAL_S
        while True:
            if await lease.try_acquire():
                return True
            if await self._stored_seq(notice.session_id) > notice.seq:
                return False
            await asyncio.sleep(delay)
            delay = min(delay * 2, LEASE_POLL_MAX_S)

    async def _stored_seq(self, session_id: str) -> int:
        raw = await self.redis.get(self.topology.request(session_id))
        if raw is None:
            return -1
        seq = orjson.loads(raw).get("seq")
        return seq if isinstance(seq, int) else -1

    async def _keep_alive(
        self,
        entry: StreamEntry,
        lease: SessionLease,
        held: asyncio.Event,
        lost: asyncio.Event,
        job: asyncio.Task[object] | None,
    ) -> None:
        """Keep the notice claimed (not reclaimed from a live worker) and the lease renewed. A lease that could
        not be renewed was lost (it expired, maybe another worker holds it now): the job is cancelled at once —
        its HTTP stream closed, nothing more published — and the notice no longer claimed, so it is reclaimed
        after the idle time by whichever worker serves it next."""
        while True:
            await asyncio.sleep(self.keepalive_s)
            try:
                await self.redis.xclaim(
                    entry.stream, MODEL_GROUP, self.consumer, min_idle_time=0, message_ids=[entry.entry_id], justid=True
                )
                if held.is_set() and not await lease.renew():
                    lost.set()
                    if job is not None:
                        job.cancel()
                    return
            except aioredis.RedisError as error:
                log.warning("model_keepalive_failed", entry_id=entry.entry_id, error=repr(error))

    # -- one request -------------------------------------------------------------------------------------

    async def _serve(
        self, entry: StreamEntry, notice: RequestReady, state: list[bytes | None], lease: SessionLease
    ) -> None:
        session = notice.session_id
        raw_request, raw_inflight, raw_config, interrupted_at = state
        stored = orjson.loads(raw_request) if raw_request is not None else None
        inflight = orjson.loads(raw_inflight) if raw_inflight is not None else None
        # The session's last answered call, whoever made it: its usage is recorded before this call overwrites
        # the record that carries it (a no-op when its worker did record it).
        await self._recover_usage(session, inflight)
        if stored is None or stored.get("seq", -1) > notice.seq:
            self.stats.superseded += 1
            model_metrics.record_call(self.defaults.model, "superseded")
            return
        digest = request_digest(stored["request"])
        if answered_already(inflight, notice.seq, digest):
            self.stats.already_answered += 1
            model_metrics.record_call(self.defaults.model, "already_answered")
            return
        publisher = SessionPublisher(
            self.redis,
            self.topology,
            session_id=session,
            request_seq=notice.seq,
            internal_key=self.internal_key,
            traceparent=notice.traceparent,
            request_digest=digest,
            fence=(lease.key, lease.owner),
            retry_s=self.settings.publish_retry_s,
        )
        if interrupted_at is not None and parse_interrupt_mark(interrupted_at).at_ms >= entry_time_ms(entry.entry_id):
            # Interrupted after the request was published: the turn is over before the call began.
            publisher.record({"seq": notice.seq, "state": "interrupted", "owner": self.consumer})
            await publisher.publish([])
            model_metrics.record_call(self.defaults.model, "interrupted")
            return
        if inflight is not None and inflight.get("state") == "streaming":
            # A worker died mid-stream (crash recovery): tombstone its partial reply, then call again.
            dead = str(inflight.get("request_id"))
            self.stats.recovered += 1
            log.warning("model_call_recovered", session_id=session, request_id=dead, seq=inflight.get("seq"))
            await publisher.publish([(f"model:{dead}:fallback", StreamFallback(request_id=dead))])
        config = SessionModelConfig.model_validate_json(raw_config) if raw_config is not None else SessionModelConfig()
        if config.max_turns is not None and over_max_turns(stored["request"], config.max_turns):
            await self._end_at_max_turns(session, notice, publisher, stored["request"], config.max_turns, digest)
            return
        switched = inflight.get("fallback_model") if inflight is not None else None
        if not (isinstance(switched, str) and continues_tool_loop(stored["request"])):
            switched = None
        else:
            # M6.3.1: after a fallback switch the rest of the turn (its tool loop) stays on the fallback model.
            config = config.model_copy(update={"model": switched, "fallback_model": switched})
        tools = await self.tools()
        signers = stored.get("thinking_models")
        params = build_model_params(
            stored["request"],
            session_id=session,
            config=config,
            defaults=self.defaults,
            tools=tools,
            thinking_models=[m for m in signers if isinstance(m, str)] if isinstance(signers, list) else (),
        )
        model = str(params.get("model") or self.defaults.model)
        fallback = config.fallback_model or self.defaults.fallback_model
        estimated = estimate_prompt_tokens(request_body(params))
        if await self._blocked(session, notice, publisher, params, model, estimated):
            return
        limits = self._output_limits(params, model, config)
        if limits.state.max_tokens_override is not None:
            params = with_max_tokens(params, limits.state.max_tokens_override)  # M1.5: the loop override
        await self._call(
            session,
            notice,
            publisher,
            params,
            model,
            fallback,
            config.tenant or DEFAULT_TENANT,
            switched=switched,
            limits=limits,
            estimated=estimated,
            last_delivery=entry.delivery_count >= self.max_deliveries,
        )

    async def _blocked(
        self,
        session: str,
        notice: RequestReady,
        publisher: SessionPublisher,
        params: JsonObject,
        model: str,
        estimated: int,
    ) -> bool:
        """M8.1 pre-flight blocking limit: a prompt estimated (``token_estimate.py``) at or above the limit —
        the context window less the output reserve, less 3 000 — is not sent; the synthetic assistant error
        ``Prompt is too long`` (invalid_request) ends the turn, answered atomically with the in-flight record."""
        body = request_body(params)
        sent_max_tokens = body.get("max_tokens")
        max_tokens = (
            sent_max_tokens
            if isinstance(sent_max_tokens, int)
            else default_max_tokens(model, table=self.defaults.max_tokens_table)
        )
        window = lowered_window(context_window(model), self.settings.context_window)
        override = self.settings.blocking_limit_override
        if not is_blocked(estimated, window=window, model_max_tokens=max_tokens, override=override):
            return False
        limit = override if override is not None else blocking_limit(window, max_tokens)
        message = create_assistant_api_error_message(
            PROMPT_TOO_LONG, error="invalid_request", clock=self.clock, ids=self.ids
        )
        publisher.record({"request_id": None, "seq": notice.seq, "state": "answered", "owner": self.consumer})
        reply = AssistantReply(message=message, request_seq=notice.seq)
        await publisher.publish([(f"model:blocked:{notice.seq}", reply)])
        self.stats.blocked += 1
        model_metrics.record_call(model, "blocked")
        log.warning("prompt_blocked", session_id=session, seq=notice.seq, estimated_tokens=estimated, limit=limit)
        return True

    def _output_limits(self, params: JsonObject, model: str, config: SessionModelConfig) -> TurnOutputLimits:
        """M8.6 for the turn the request belongs to, read from the request (any worker may serve the next one):
        the resumptions so far are its meta "Output token limit hit" messages; under the capped default the
        escalation (64 000, bounded by the model's upper limit) comes before any resumption, so a turn that
        resumed already escalated, and keeps the override."""
        capped = self.defaults.capped_default_max_tokens
        explicit = config.max_tokens is not None or self.defaults.max_tokens is not None
        escalated = min(ESCALATED_MAX_TOKENS, max_tokens_upper_limit(model, table=self.defaults.max_tokens_table))
        recoveries = count_recoveries(request_body(params))
        override = escalated if capped and not explicit and recoveries > 0 else None
        state = OutputLimitState(recovery_count=recoveries, max_tokens_override=override)
        return TurnOutputLimits(state, capped_default=capped, explicit_max_tokens=explicit, escalated=escalated)

    async def _end_at_max_turns(
        self,
        session: str,
        notice: RequestReady,
        publisher: SessionPublisher,
        api_request: JsonObject,
        max_turns: int,
        digest: str,
    ) -> None:
        """A3.8 / R10.6: the turn used its ``max_turns`` calls (the last reply's tools have run: the request
        carries their results). No call: the ``max_turns_reached`` attachment ends the turn, and the request
        is recorded as answered (a redelivered notice is not served again)."""
        turn_count = next_turn_count(api_request)
        attachment = max_turns_attachment(
            max_turns=max_turns, turn_count=turn_count, uuid=self.ids(), timestamp=self.clock()
        )
        publisher.record({"seq": notice.seq, "state": "answered", "owner": self.consumer, "max_turns": max_turns})
        await publisher.publish([(f"model:max_turns:{digest}", AttachmentNotice(message=attachment))])
        model_metrics.record_call(self.defaults.model, "max_turns")
        log.info("max_turns_reached", session_id=session, seq=notice.seq, max_turns=max_turns, turn_count=turn_count)

    async def _call(
        self,
        session: str,
        notice: RequestReady,
        publisher: SessionPublisher,
        params: JsonObject,
        model: str,
        fallback: str | None,
        tenant: str,
        *,
        switched: str | None,
        limits: TurnOutputLimits,
        estimated: int,
        last_delivery: bool = False,
    ) -> None:
        max_tokens = request_body(params).get("max_tokens")
        # The token bucket is charged the prompt's estimate (M8.1's) and the most the reply may add.
        estimate = max(1, estimated) + (max_tokens if isinstance(max_tokens, int) else 0)
        if self.bucket is not None:
            await self.bucket.acquire(tenant, tokens=estimate)  # waits, never fails; its wait is its own metric
        call = ModelCall(
            self.client,
            publisher,
            settings=self.settings,
            params=params,
            model=model,
            fallback_model=fallback,
            owner=self.consumer,
            switched_to=switched,
            output_limits=limits.state,
            capped_default=limits.capped_default,
            explicit_max_tokens=limits.explicit_max_tokens,
            escalated_max_tokens=limits.escalated,
            clock=self.clock,
            ids=self.ids,
        )
        span = self._start_span(notice, session, params, model)
        call.on_retry = functools.partial(_retry_event, span)
        started = time.perf_counter()
        running = _Running(asyncio.create_task(call.run(), name=f"model:{session}"))
        self._running[session] = running
        self.stats.calls += 1
        model_metrics.call_started()
        try:
            result = await running.task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if running.interrupted_at is None or (current is not None and current.cancelling()):
                self._record_billed(session, call)
                span.end(None)
                raise  # shutdown or a lost lease: the notice stays pending and is served again
            await self._aborted(session, notice, publisher, call, running.interrupted_at)
            span.set_attribute("error.type", "interrupted")
            span.end(None)
            return
        except BaseException as error:
            self._record_billed(session, call)
            span.set_attribute("error.type", type(error).__name__)
            span.end(error)
            if not (last_delivery and isinstance(error, Exception) and not isinstance(error, SessionLeaseLost)):
                raise  # the notice stays pending: reclaimed, served again whole (a lost lease: by its holder)
            # The notice's last delivery: dead-lettered, nobody would end the turn. End it here (M7.4).
            await call.end_abandoned(error)
            model_metrics.record_call(call.model, "abandoned")
            return
        finally:
            model_metrics.call_ended()
            self._running.pop(session, None)
        duration = time.perf_counter() - started
        await self._account(session, tenant, estimate, result, duration)
        self._end_span(span, result)

    async def _aborted(
        self, session: str, notice: RequestReady, publisher: SessionPublisher, call: ModelCall, interrupted_at: float
    ) -> None:
        """The interrupt closed the turn (R10.1): publish nothing more; remember the request as answered."""
        await publisher.close()
        abort_s = time.perf_counter() - interrupted_at
        self.stats.interrupted += 1
        model_metrics.record_interrupt_abort(abort_s)
        model_metrics.record_call(call.model, "interrupted")
        publisher.record(
            {
                "request_id": call.request_id,
                "seq": notice.seq,
                "state": "interrupted",
                "owner": self.consumer,
                "aborted_at_ms": time.time() * 1000,
                "abort_s": abort_s,
            }
        )
        await publisher.publish([])
        log.info("model_call_interrupted", session_id=session, request_id=call.request_id, abort_ms=abort_s * 1000)

    async def _account(self, session: str, tenant: str, estimate: int, result: CallResult, duration_s: float) -> None:
        model_metrics.record_call(result.model, result.outcome)
        model_metrics.record_duration(result.model, duration_s, result.error_type)
        if result.time_to_first_chunk_s is not None:
            model_metrics.record_first_chunk(result.model, result.time_to_first_chunk_s)
        billed = [response for response in [*result.superseded, result] if response.usage is not None]
        # An escalated cut reply was paid for too (M8.5). The reply's last event has landed: a Redis restarting
        # now must not leave its usage unrecorded until the notice is reclaimed (issue 25), so the record is
        # ridden out like the reply's writes; past that bound the notice stays pending, and whoever serves it
        # records the usage from the in-flight record (``_recover_usage``).
        await self._record_usages(session, billed, bound_s=self.settings.publish_retry_s)
        if self.bucket is not None:
            actual = sum(total_tokens(response.usage) for response in billed)
            await self.bucket.settle(tenant, estimated=estimate, actual=actual)

    def _record_billed(self, session: str, call: ModelCall) -> None:
        """The call was abandoned (its writes never landed, its lease was lost) after the API sent complete
        replies: the API billed them, and the request is called again by whoever serves its notice next, so
        their usage is recorded now — once (the usage store deduplicates by request id). Redis may be the
        reason the call failed: the records are written in the background until they land."""
        billed = call.billed()
        if billed:
            task = asyncio.create_task(self._record_until_written(session, billed), name=f"usage:{session}")
            self._usage_writes.add(task)
            task.add_done_callback(self._usage_writes.discard)

    async def _record_until_written(self, session: str, responses: list[CallResult]) -> None:
        try:
            await self._record_usages(session, responses, bound_s=USAGE_RETRY_S)
        except (RedisUnavailable, aioredis.RedisError, OSError) as error:
            log.error("model_usage_lost", session_id=session, error=repr(error))
            return
        for response in responses:
            log.warning("model_usage_of_abandoned_call", session_id=session, request_id=response.request_id)

    async def _record_usages(self, session: str, responses: list[CallResult], *, bound_s: float) -> None:
        """Record each response's usage (the metrics once, the store's write ridden out through a Redis away for up
        to ``bound_s`` seconds, then :class:`RedisUnavailable`). A write that is repeated after it landed is a
        no-op: the usage store deduplicates by request id."""
        for response in responses:
            usage = response.usage
            assert usage is not None
            billed_model = response.response_model or response.model
            cost = price_call(billed_model, usage, self.prices)  # once per response (M10.1 [REC], M5.6)
            model_metrics.record_tokens(response.model, usage)
            model_metrics.record_cost(billed_model, cost.usd)
            record = functools.partial(
                record_usage,
                self.redis,
                self.topology,
                session,
                model=billed_model,
                usage=usage,
                cost_usd=cost.usd,
                priced=cost.priced,
                prices_as_of=cost.as_of.isoformat(),
                request_id=response.request_id,
            )
            await ride_out(record, bound_s=bound_s, what=f"record the usage of {response.request_id} of {session}")

    async def _recover_usage(self, session: str, inflight: JsonObject | None) -> None:
        """Record the usage an answered in-flight record carries (``call.py``), read when a notice of the session
        is served: the worker that made the call may have died, lost its lease or failed to write after the
        reply's last event landed and before :meth:`_account` recorded the usage — and the next request of the
        session overwrites the record, so the notice that comes back is superseded and can no longer see it.
        Recording it again is a no-op when that worker did record it (the usage store deduplicates by request
        id): one round trip per call."""
        if inflight is None:
            return
        usage, model, request_id = inflight.get("usage"), inflight.get("usage_model"), inflight.get("request_id")
        if not (isinstance(usage, dict) and isinstance(model, str) and isinstance(request_id, str)):
            return
        recorded = await record_priced_usage(
            self.redis, self.topology, session, model=model, usage=usage, prices=self.prices, request_id=request_id
        )
        if recorded:
            log.warning("model_usage_recovered", session_id=session, request_id=request_id)

    # -- spans (M11) -----------------------------------------------------------------------------------------

    def _start_span(self, notice: RequestReady, session: str, params: JsonObject, model: str) -> Span:
        """M11.1: one ``chat {model}`` CLIENT span per logical call, retries and fallbacks included (M11.4)."""
        attributes = request_attributes(params, conversation_id=session)
        return self.tracer.start(
            span_name(model), notice.traceparent, attributes=_span_values(attributes), kind="CLIENT"
        )

    def _end_span(self, span: Span, result: CallResult) -> None:
        message: JsonObject = {
            "id": result.response_id,
            "model": result.response_model,
            "stop_reason": result.stop_reason,
        }
        message["usage"] = result.usage
        attributes = response_attributes(message)
        for key, value in _span_values(attributes).items():
            span.set_attribute(key, value)
        reasons = attributes.get("gen_ai.response.finish_reasons")
        if span.otel_span is not None and isinstance(reasons, list):
            span.otel_span.set_attribute("gen_ai.response.finish_reasons", reasons)  # a string array (M11.2)
        if result.error_type:
            for key, value in _span_values(error_attributes(result.error_type)).items():
                span.set_attribute(key, value)
        span.end(None)


def _retry_event(span: Span, failure: ApiFailure, attempt: int, delay_ms: float) -> None:
    """M11.4: one span covers the logical call; each retry is an event on it (attempt, delay, status)."""
    if span.otel_span is not None:
        attributes: dict[str, AttributeValue] = {"retry.attempt": attempt, "retry.delay_ms": delay_ms}
        attributes["error.type"] = error_type_label(failure)
        if failure.status is not None:
            attributes["http.response.status_code"] = failure.status
        span.otel_span.add_event("retry", attributes=attributes)


def _span_values(attributes: Mapping[str, object]) -> dict[str, AttributeValue]:
    """OTel attribute values: scalars as they are, a list of strings (finish reasons) joined."""
    values: dict[str, AttributeValue] = {}
    for key, value in attributes.items():
        if isinstance(value, str | int | float | bool):
            values[key] = value
        elif isinstance(value, list):
            values[key] = ",".join(str(item) for item in value)
    return values
