"""The model worker: competing consumers of the request notices (group ``model`` on every shard's ``requests``
stream) that turn a session's published API request into a streamed model reply on the bus.

Per notice (a :class:`~shared.events.RequestReady` pointing at the session's stored request):

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
   catalog (``build_model_params``), the tenant's token bucket first, then stream / retry / fall back.
4. **Interrupts** arrive on the interrupts channel (ingestion publishes every applied interrupt): the
   session's call task is cancelled, which closes the HTTP stream at once; nothing more is published (the
   interrupt already closed the turn, R10.1; ingestion drops late events of the interrupted request).
5. **Usage and cost** of a finished call are recorded per session (M10) and in the metrics (M11).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import orjson
import redis.asyncio as aioredis
import structlog
from anthropic import AsyncAnthropic

from services.model.call import CallResult, ModelCall
from services.model.failures import error_type_label
from services.model.publisher import SessionPublisher
from services.model.session_lease import SessionLease
from services.observability import model_metrics
from services.observability.tracing import AttributeValue, Span, WorkerTracer
from services.runtime.codec import decode_entry
from services.runtime.consumer import BatchOutcome, Poison
from services.runtime.entries import StreamEntry
from services.runtime.settings import ModelSettings
from services.runtime.slots import JobSlots
from services.runtime.topology import MODEL_GROUP, Topology
from services.runtime.usage_store import record_usage
from shared.clock import Clock, utc_now
from shared.events import RequestReady, StreamFallback, UserPrompt
from shared.ids import IdSource, random_uuid
from shared.json_types import JsonObject
from shared.model.cost import PriceTable, price_call
from shared.model.genai import error_attributes, request_attributes, response_attributes, span_name
from shared.model.limits import (
    OUTPUT_TOKEN_RECOVERY_MESSAGE,
    OutputLimitAction,
    OutputLimitState,
    decide_output_limit,
    output_limit_error,
)
from shared.model.request import ModelDefaults, build_model_params, request_body
from shared.model.retry import ApiFailure
from shared.model.session_config import SessionModelConfig
from shared.tool_definitions import ToolDefinition

log = structlog.get_logger(__name__)

LEASE_POLL_INITIAL_S = 0.02
LEASE_POLL_MAX_S = 0.5
DEFAULT_TENANT = "default"
FINAL_STATES = frozenset({"answered", "interrupted"})
"""In-flight record states that mean the request needs no call any more."""

ToolSource = Callable[[], Awaitable[Sequence[ToolDefinition]]]


class Bucket(Protocol):
    """What the worker needs of a tenant token bucket (``services/runtime/token_bucket.py``)."""

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


def estimate_input_tokens(params: JsonObject) -> int:
    """A cheap upper-ish estimate of a request's input tokens for the token bucket (≈ 4 bytes a token)."""
    size = len(orjson.dumps(params.get("messages"))) + len(orjson.dumps(params.get("system")))
    size += len(orjson.dumps(params.get("tools")))
    return max(1, size // 4)


def total_tokens(usage: JsonObject | None) -> int:
    """M10.4: input + cache creation + cache read + output."""
    if not usage:
        return 0
    names = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens")
    return sum(value for name in names if isinstance(value := usage.get(name), int))


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
        self.tracer = tracer if tracer is not None else WorkerTracer("model")
        self.clock = clock
        self.ids = ids
        self.stats = ModelWorkerStats()
        self._running: dict[str, _Running] = {}

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
            if self.slots.holds(entry.entry_id):
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
            owner=self.consumer,
            ttl_ms=self.settings.session_lease_ms,
        )
        held = asyncio.Event()
        keepalive = asyncio.create_task(self._keep_alive(entry, lease, held))
        try:
            state = await self._take(lease, notice)
            if state is None:
                self.stats.superseded += 1
                model_metrics.record_call(self.defaults.model, "superseded")
                return
            held.set()
            try:
                await self._serve(entry, notice, state)
            finally:
                held.clear()
                await lease.release()
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive

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

    async def _keep_alive(self, entry: StreamEntry, lease: SessionLease, held: asyncio.Event) -> None:
        """Keep the notice claimed (not reclaimed from a live worker) and the lease renewed."""
        while True:
            await asyncio.sleep(self.keepalive_s)
            try:
                await self.redis.xclaim(
                    entry.stream, MODEL_GROUP, self.consumer, min_idle_time=0, message_ids=[entry.entry_id], justid=True
                )
                if held.is_set() and not await lease.renew():
                    log.error("session_lease_lost", session_id=lease.key, entry_id=entry.entry_id)
            except aioredis.RedisError as error:
                log.warning("model_keepalive_failed", entry_id=entry.entry_id, error=repr(error))

    # -- one request -------------------------------------------------------------------------------------

    async def _serve(self, entry: StreamEntry, notice: RequestReady, state: list[bytes | None]) -> None:
        session = notice.session_id
        raw_request, raw_inflight, raw_config, interrupted_at = state
        stored = orjson.loads(raw_request) if raw_request is not None else None
        if stored is None or stored.get("seq", -1) > notice.seq:
            self.stats.superseded += 1
            model_metrics.record_call(self.defaults.model, "superseded")
            return
        inflight = orjson.loads(raw_inflight) if raw_inflight is not None else None
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
        )
        if interrupted_at is not None and int(interrupted_at) >= entry_time_ms(entry.entry_id):
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
        await self._call(
            session, notice, publisher, params, model, fallback, config.tenant or DEFAULT_TENANT, switched=switched
        )

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
    ) -> None:
        max_tokens = request_body(params).get("max_tokens")
        estimate = estimate_input_tokens(params) + (max_tokens if isinstance(max_tokens, int) else 0)
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
            clock=self.clock,
            ids=self.ids,
        )
        span = self._start_span(notice, session, params, model)
        call.on_retry = functools.partial(_retry_event, span)
        started = time.perf_counter()
        running = _Running(asyncio.create_task(call.run(), name=f"model:{session}"))
        self._running[session] = running
        self.stats.calls += 1
        model_metrics.IN_FLIGHT.inc()
        try:
            result = await running.task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if running.interrupted_at is None or (current is not None and current.cancelling()):
                span.end(None)
                raise  # shutdown: the notice stays pending and is served again
            await self._aborted(session, notice, publisher, call, running.interrupted_at)
            span.set_attribute("error.type", "interrupted")
            span.end(None)
            return
        except BaseException as error:
            span.set_attribute("error.type", type(error).__name__)
            span.end(error)
            raise
        finally:
            model_metrics.IN_FLIGHT.dec()
            self._running.pop(session, None)
        duration = time.perf_counter() - started
        await self._account(session, tenant, estimate, result, duration)
        self._end_span(span, result)
        await self._after_truncation(publisher, result, params)

    async def _after_truncation(self, publisher: SessionPublisher, result: CallResult, params: JsonObject) -> None:
        """M8.5: a reply cut by ``max_tokens`` (or the context window) without a tool call is resumed: the meta
        user message asks the model to go on, and the normalizer's next request calls it again — at most 3
        times in a turn (counted from the request itself, so any worker may serve the next one). The M8.3
        error text of each cut reply is in the log already (ingestion writes it; Claude Code withholds it
        until the recoveries are used up)."""
        error = output_limit_error(result.stop_reason)
        if error is None or result.outcome != "ok":
            return
        state = OutputLimitState(recovery_count=count_recoveries(request_body(params)))
        decision = decide_output_limit(error, state=state, tool_use_streamed=result.tool_use)
        if decision.action is not OutputLimitAction.RESUME:
            return
        prompt = UserPrompt(content=OUTPUT_TOKEN_RECOVERY_MESSAGE, is_meta=True)
        await publisher.publish([(f"model:{result.request_id or publisher.request_seq}:resume", prompt)])

    async def _aborted(
        self, session: str, notice: RequestReady, publisher: SessionPublisher, call: ModelCall, interrupted_at: float
    ) -> None:
        """The interrupt closed the turn (R10.1): publish nothing more; remember the request as answered."""
        await publisher.close()
        abort_s = time.perf_counter() - interrupted_at
        self.stats.interrupted += 1
        model_metrics.INTERRUPT_ABORT.observe(abort_s)
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
        usage = result.usage
        if usage is not None:
            billed_model = result.response_model or result.model
            cost = price_call(billed_model, usage, self.prices)  # once per response (M10.1 [REC], M5.6)
            model_metrics.record_tokens(result.model, usage)
            model_metrics.record_cost(billed_model, cost.usd)
            await record_usage(
                self.redis,
                self.topology,
                session,
                model=billed_model,
                usage=usage,
                cost_usd=cost.usd,
                priced=cost.priced,
                prices_as_of=cost.as_of.isoformat(),
                request_id=result.request_id,
            )
        if self.bucket is not None:
            await self.bucket.settle(tenant, estimated=estimate, actual=total_tokens(usage))

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
