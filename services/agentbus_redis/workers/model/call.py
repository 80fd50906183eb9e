"""One logical model call (agent-loop.md §M): stream, retry, fall back, publish.

- Each attempt to open the stream runs under Claude Code's retry policy (M4, ``model/retry.py``); a
  retried error is announced with an ``api_error`` system message (M4.4) before the backoff sleep.
- The raw stream (``messages.create(stream=True)``, M1.10; ``beta.messages.create(stream=True, betas=...)``
  for a request that needs betas, ``model/betas.py``: system-role messages) is published event by event into
  the session's ingress (``publisher.py``); ingestion accumulates it into the assistant messages (M2.4, R9)
  and hands out the tool jobs. The in-flight record goes out with the first event (crash recovery,
  ``worker.py``) and the "answered" record with ``message_stop``.
- A stream that breaks (an ``error`` event, a dropped connection, the idle watchdog of M2.8) or ends
  incomplete (M2.5: no ``message_start``, or neither a finished block nor a stop reason) is tombstoned
  (``StreamFallback``, M5.3 / R6.1) and the request is repeated without streaming (M5.2, with
  ``non_streaming_fallback_params``, M1.7), its 529 counter seeded at 1 after an overload (M4.9); the whole
  response is published as one assistant message. A stream that ends complete by M2.5 but without
  ``message_stop`` is a reply: the worker closes it on the bus with a ``message_stop`` of its own.
- Three overloads in a row switch to the fallback model (M6.3): a warning system message
  ``Switched to <display name> due to high demand for <display name>`` and the request again on that model.
- A reply cut by ``max_tokens`` or the context window (M8.3–M8.5): decided at its ``message_delta`` — resumed
  (the meta user message written with its ``message_stop``), re-issued once with 64 000 (gated), or left to its
  tools, its API error withheld; or, with the resumptions used up, its error logged.
- Giving up publishes the synthetic assistant error of M7 (``model/error_texts.py``). Partial
  messages of a failed stream were tombstoned first, so no tool_use is left without its result.

A user abort is never a failure: the caller cancels :meth:`ModelCall.run` (M2.9) and nothing more is published.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, cast

import anthropic
import structlog
from anthropic import AsyncAnthropic

from agentbus_redis.bus.events import AssistantReply, IngressPayload, StreamFallback, SystemNotice, UserPrompt
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.config.settings import ModelSettings
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.factories import create_assistant_api_error_message, create_informational_message
from agentbus_redis.messages.from_api import normalize_content_from_api
from agentbus_redis.messages.kinds import AssistantMessage, AssistantPayload
from agentbus_redis.messages.system import ApiErrorSystemMessage
from agentbus_redis.model.betas import required_betas
from agentbus_redis.model.error_texts import assistant_error_for, switched_model_notice
from agentbus_redis.model.limits.max_tokens import ESCALATED_MAX_TOKENS
from agentbus_redis.model.limits.window import (
    OUTPUT_TOKEN_RECOVERY_MESSAGE,
    OutputLimitAction,
    OutputLimitDecision,
    OutputLimitState,
    decide_output_limit,
    output_limit_error,
)
from agentbus_redis.model.request import non_streaming_fallback_params, request_body, with_max_tokens, with_model
from agentbus_redis.model.retry import (
    ApiFailure,
    Decision,
    GiveUp,
    Retry,
    RetryPolicy,
    RetryState,
    SwitchModel,
    decide,
)
from agentbus_redis.model.stream_end import closing_events
from agentbus_redis.model.thinking import thinking_budget
from agentbus_redis.observability import model_metrics
from agentbus_redis.streaming.usage import EMPTY_USAGE, update_usage
from agentbus_redis.workers.model.failures import error_type_label, failure_of
from agentbus_redis.workers.model.publisher import PublishFailed, SessionPublisher
from agentbus_redis.workers.model.session_lease import SessionLeaseLost

log = structlog.get_logger(__name__)

T = TypeVar("T")

CallEnd = Literal["ok", "api_error"]


@dataclass(slots=True)
class CallResult:
    """How a logical call ended, for usage, metrics and the span."""

    outcome: CallEnd
    model: str
    """The model of the last attempt (the fallback model after a switch)."""
    request_id: str | None = None
    usage: JsonObject | None = None
    response_model: str | None = None
    response_id: str | None = None
    stop_reason: str | None = None
    error_type: str | None = None
    attempts: int = 0
    time_to_first_chunk_s: float | None = None
    tool_use: bool = False
    """The reply holds a tool_use block (M8.5: a truncated reply with one runs its tools, no recovery)."""
    output_limit: OutputLimitAction | None = None
    """M8.5: what the call did about a reply cut by ``max_tokens`` / the context window (None: not cut)."""
    superseded: list[CallResult] = field(default_factory=list)
    """Earlier responses of this call that were re-issued (the M8.5 escalation): their usage counts too."""


@dataclass(slots=True)
class _StreamProgress:
    """What the worker itself needs from a stream (ingestion does the real accumulation): completeness
    (M2.5), usage (M2.6), stop reason, the response's id and model."""

    started: bool = False
    blocks_done: int = 0
    stop_reason: str | None = None
    stopped: bool = False
    message_id: str | None = None
    model: str | None = None
    tool_use: bool = False
    finished_tool_use: bool = False
    """A tool_use block reached its ``content_block_stop`` (R10.6: the loop goes on only from a finished one)."""
    open_blocks: dict[int, str] = field(default_factory=dict)
    usage: JsonObject = field(default_factory=lambda: dict(EMPTY_USAGE))
    output_limit: OutputLimitDecision | None = None
    """M8.5: the decision about a cut reply, made at the ``message_delta`` that brought the stop reason."""

    def feed(self, event: JsonObject) -> None:
        kind = event.get("type")
        if kind == "content_block_stop":
            self.blocks_done += 1
            index = event.get("index")
            if isinstance(index, int) and self.open_blocks.pop(index, None) == "tool_use":
                self.finished_tool_use = True
        elif kind == "content_block_start":
            block = event.get("content_block")
            self.tool_use = self.tool_use or (isinstance(block, dict) and block.get("type") == "tool_use")
            index = event.get("index")
            block_type = block.get("type") if isinstance(block, dict) else None
            if isinstance(index, int) and isinstance(block_type, str):
                self.open_blocks[index] = block_type
        elif kind == "message_start":
            self.started = True
            message = event.get("message")
            if isinstance(message, dict):
                self.message_id = message.get("id") if isinstance(message.get("id"), str) else None  # type: ignore[assignment]
                self.model = message.get("model") if isinstance(message.get("model"), str) else None  # type: ignore[assignment]
                usage = message.get("usage")
                self.usage = update_usage(self.usage, usage if isinstance(usage, dict) else None)
        elif kind == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and isinstance(delta.get("stop_reason"), str):
                self.stop_reason = delta["stop_reason"]  # type: ignore[assignment]
            usage = event.get("usage")
            self.usage = update_usage(self.usage, usage if isinstance(usage, dict) else None)
        elif kind == "message_stop":
            self.stopped = True

    def incomplete(self) -> bool:
        """M2.5: no ``message_start``, or neither a completed block nor a stop reason. A stream that ended
        cleanly after that without ``message_stop`` is complete: Claude Code does nothing at
        ``message_stop`` (M2.4) and the SDK raises nothing when the body simply ends."""
        return not self.started or (self.blocks_done == 0 and self.stop_reason is None)


class _StreamBroke(Exception):
    """The stream failed after it was opened (M5.1 a/b); ``failure`` says how."""

    def __init__(self, failure: ApiFailure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def _blocks(content: object) -> list[Mapping[str, Any]]:
    return [block for block in content if isinstance(block, dict)] if isinstance(content, list) else []


def _with_client_request_id(params: JsonObject, client_request_id: str) -> JsonObject:
    """M1.2: every attempt carries its own ``x-client-request-id`` (beside any headers the params hold)."""
    headers = params.get("extra_headers")
    merged: JsonObject = dict(headers) if isinstance(headers, dict) else {}
    merged["x-client-request-id"] = client_request_id
    return {**params, "extra_headers": merged}


INCOMPLETE_STREAM = ApiFailure(status=None, message="Stream ended without receiving any events", connection=True)


class ModelCall:
    """One logical call for one request of one session (see the module docstring)."""

    def __init__(
        self,
        client: AsyncAnthropic,
        publisher: SessionPublisher,
        *,
        settings: ModelSettings,
        params: JsonObject,
        model: str,
        fallback_model: str | None,
        owner: str,
        switched_to: str | None = None,
        output_limits: OutputLimitState | None = None,
        capped_default: bool = False,
        explicit_max_tokens: bool = False,
        escalated_max_tokens: int = ESCALATED_MAX_TOKENS,
        on_retry: Callable[[ApiFailure, int, float], None] | None = None,
        jitter: Callable[[], float] = random.random,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
    ) -> None:
        self.client = client
        self.publisher = publisher
        self.settings = settings
        self.policy = RetryPolicy(
            max_retries=settings.max_retries,
            base_delay_ms=settings.retry_base_delay_ms,
            max_delay_ms=settings.retry_max_delay_ms,
            fallback_for_all_models=settings.fallback_for_all_models,
        )
        self.params = params
        self.model = model
        self.fallback_model = fallback_model if fallback_model != model else None
        self.owner = owner
        self.jitter = jitter
        self.sleep = sleep
        self.clock = clock
        self.ids = ids
        self.attempts = 0
        self.call_id = uuid.uuid4().hex
        self.events_published = 0
        self.request_id: str | None = None
        """The request id of the stream being read (what a crash-recovering worker tombstones)."""
        self.sent_at: float | None = None
        self.first_chunk_s: float | None = None
        self.switched_to = switched_to
        self.output_limits = output_limits if output_limits is not None else OutputLimitState()
        """M8.6: the turn's recovery state (resumptions so far, the loop's ``max_tokens`` override)."""
        self.capped_default = capped_default
        self.explicit_max_tokens = explicit_max_tokens
        self.escalated_max_tokens = escalated_max_tokens
        self.superseded: list[CallResult] = []
        self.received: list[CallResult] = []
        """Complete replies the API sent whose publishing is under way: when it fails (the call is abandoned and
        called again), their usage is still recorded by the worker — the API billed them (issue 25)."""
        self._streaming: tuple[str, _StreamProgress] | None = None
        """The request whose stream is being read, and what it brought so far."""
        self.on_retry = on_retry
        """Told (failure, attempt, delay in ms) before each backoff sleep: the span's retry events (M11.4)."""
        """The fallback model this call (or an earlier call of its turn) switched to (M6)."""

    async def run(self) -> CallResult:
        while True:
            outcome = await self._one_model()
            if isinstance(outcome, CallResult) and outcome.output_limit is OutputLimitAction.ESCALATE:
                await self._escalate(outcome)
                continue
            if isinstance(outcome, CallResult):
                outcome.superseded = self.superseded
                return outcome
            if isinstance(outcome, SwitchModel):
                await self._switch_model(outcome)
                continue
            return await self._give_up(outcome)

    # -- one model: stream, else the non-streaming fallback ---------------------------------------

    async def _one_model(self) -> CallResult | SwitchModel | GiveUp:
        state = RetryState()
        opened = await self._with_retry(state, self._open_stream)
        if not isinstance(opened, tuple):
            return opened
        stream, request_id = opened
        self.request_id = request_id
        progress = _StreamProgress()
        # Kept when the read is abandoned (a lost lease, a refused write, a cancel): billed() reads it then.
        self._streaming = (request_id, progress)
        try:
            await self._read_stream(stream, request_id, progress)
        except _StreamBroke as broke:
            self._streaming = None
            return await self._stream_fallback(request_id, broke.failure)
        self._streaming = None
        return self._answer(request_id, progress)

    def billed(self) -> list[CallResult]:
        """The replies of this call the API billed in full, with their usage: those superseded (M8.5), those
        received whose publishing was under way, and the one being streamed once its ``message_delta`` came
        (its usage is final then). A call abandoned at any point (its lease lost, its writes refused) still
        counts these (issue 25: the soak saw a reply's usage lost when the lease went after its stop reason)."""
        responses = [*self.superseded, *self.received]
        if self._streaming is not None:
            request_id, progress = self._streaming
            if progress.stop_reason is not None and all(r.request_id != request_id for r in responses):
                responses.append(self._answer(request_id, progress))
        return [response for response in responses if response.usage is not None]

    def _answer(self, request_id: str, progress: _StreamProgress) -> CallResult:
        return CallResult(
            outcome="ok",
            model=self.model,
            request_id=request_id,
            usage=progress.usage,
            response_model=progress.model,
            response_id=progress.message_id,
            stop_reason=progress.stop_reason,
            attempts=self.attempts,
            time_to_first_chunk_s=self.first_chunk_s,
            tool_use=progress.tool_use,
            output_limit=progress.output_limit.action if progress.output_limit is not None else None,
        )

    async def _open_stream(self) -> tuple[anthropic.AsyncStream[Any], str]:
        client_request_id = str(uuid.uuid4())
        params = self._params()
        self.sent_at = time.perf_counter()
        stream = await self._create(
            _with_client_request_id(params, client_request_id), stream=True, timeout=self.settings.request_timeout_s
        )
        request_id = stream.response.headers.get("request-id") or client_request_id
        return stream, request_id

    async def _read_stream(
        self, stream: anthropic.AsyncStream[Any], request_id: str, progress: _StreamProgress
    ) -> None:
        """Publish every event as it arrives; raise :class:`_StreamBroke` when the stream fails (M5.1)."""
        publisher = self.publisher
        loop = asyncio.get_running_loop()
        idle_s = self.settings.stream_idle_timeout_s
        sent_max_tokens = request_body(self.params).get("max_tokens")
        max_tokens = sent_max_tokens if isinstance(sent_max_tokens, int) else None
        index = 0
        try:
            async with asyncio.timeout(idle_s) as idle:
                async for item in stream:
                    idle.reschedule(loop.time() + idle_s)
                    event = cast(JsonObject, item.to_dict())
                    if index == 0:
                        self.first_chunk_s = time.perf_counter() - (self.sent_at or 0.0)
                        publisher.record(self._inflight(request_id, "streaming"))
                    self._publish_event(request_id, index, event, progress, max_tokens if index == 0 else None)
                    index += 1
                    await publisher.send_started()
        except (asyncio.CancelledError, SessionLeaseLost, PublishFailed):
            # An interrupt (M2.9), the session's lease lost, or a write that never landed: close the connection
            # now; what was published stays (R10.1; the lease's next holder tombstones it and calls again).
            await stream.close()
            raise
        except Exception as error:  # API error events, httpx transport errors, the idle watchdog, bad SSE
            await self._abandon_stream(stream, request_id, index)
            raise _StreamBroke(failure_of(error)) from error
        finally:
            self.events_published += index
        if progress.incomplete():
            await self._abandon_stream(stream, request_id, index)
            raise _StreamBroke(INCOMPLETE_STREAM)
        if not progress.stopped:
            # Complete by M2.5 but unterminated (issue 25: a clean cut before the stop reason, or inside a
            # block after a finished one): closed as Claude Code's loop reads it (model/stream_end.py).
            log.warning(
                "stream_ended_without_message_stop", request_id=request_id, events=index, stop=progress.stop_reason
            )
            for closing in closing_events(
                stop_reason=progress.stop_reason, finished_tool_use=progress.finished_tool_use
            ):
                self._publish_event(request_id, index, closing, progress, None)
                index += 1
                self.events_published += 1
        self.received.append(self._answer(request_id, progress))
        await publisher.drain()
        self.received.pop()

    def _publish_event(
        self, request_id: str, index: int, event: JsonObject, progress: _StreamProgress, max_tokens: int | None
    ) -> None:
        """Queue one stream event, with what the reply's end brings: the "answered" in-flight record and the
        M8.5 resumption — the meta user message written with the ``message_stop``, so a reply is never logged
        without it. A reply the M8.5 escalation re-issues is not closed: its ``message_stop`` is held back
        (the in-flight record stays "streaming", so a crash calls again) and :meth:`_escalate` tombstones it."""
        progress.feed(event)
        kind = event.get("type")
        withhold = kind == "message_delta" and self._withholds_stop_error(progress)
        decision = progress.output_limit
        if progress.stopped and decision is not None and decision.action is OutputLimitAction.ESCALATE:
            return  # the reply stays open on the bus: the escalation retracts it as a failed stream's (R6.1)
        if progress.stopped:
            self.publisher.record(self._inflight(request_id, "answered", progress.usage, progress.model or self.model))
        self.publisher.add_event(request_id, index, event, max_tokens=max_tokens, withhold_stop_error=withhold)
        if progress.stopped and decision is not None and decision.action is OutputLimitAction.RESUME:
            prompt = UserPrompt(content=OUTPUT_TOKEN_RECOVERY_MESSAGE, is_meta=True)
            self.publisher.add_entry(f"model:{request_id}:resume", prompt)

    def _withholds_stop_error(self, progress: _StreamProgress) -> bool:
        """M8.3/M8.5 at the ``message_delta`` of a cut reply: decide the recovery once (every block, tool calls
        included, streamed before it); the cut's API error is withheld unless the recoveries are used up."""
        if progress.output_limit is None:
            error = output_limit_error(progress.stop_reason)
            if error is None:
                return False
            progress.output_limit = decide_output_limit(
                error,
                state=self.output_limits,
                tool_use_streamed=progress.tool_use,
                capped_default=self.capped_default,
                explicit_max_tokens=self.explicit_max_tokens,
            )
            log.info(
                "reply_cut",
                stop_reason=progress.stop_reason,
                action=progress.output_limit.action.value,
                recoveries=self.output_limits.recovery_count,
            )
        return progress.output_limit.action is not OutputLimitAction.GIVE_UP

    async def _escalate(self, cut: CallResult) -> None:
        """M8.5 (gated ``tengu_otk_slot_v1``): the same request once more with ``max_tokens`` 64 000. The cut
        reply is tombstoned (R6.1): the request is re-issued without it, and the log keeps one answer."""
        request_id = cut.request_id or self.call_id
        self.superseded.append(cut)
        log.info("max_tokens_escalated", request_id=request_id, max_tokens=self.escalated_max_tokens)
        await self.publisher.publish([(f"model:{request_id}:escalate", StreamFallback(request_id=request_id))])
        self.params = with_max_tokens(self.params, self.escalated_max_tokens)
        self.output_limits = OutputLimitState(
            recovery_count=self.output_limits.recovery_count, max_tokens_override=self.escalated_max_tokens
        )

    async def _abandon_stream(self, stream: anthropic.AsyncStream[Any], request_id: str, events: int) -> None:
        """Close the broken stream and tombstone what it published (M5.3)."""
        try:
            await stream.close()
        except Exception:  # the stream is already broken; closing is best effort
            log.debug("stream_close_failed", request_id=request_id)
        # What arrived was published as it arrived (the queue is written out, not dropped: the log then holds
        # the same partial messages whatever the timing, and the fallback tombstones them).
        if events:
            await self.publisher.publish([(f"model:{request_id}:fallback", StreamFallback(request_id=request_id))])

    async def _stream_fallback(self, request_id: str, failure: ApiFailure) -> CallResult | SwitchModel | GiveUp:
        """M5.2: the same request without streaming, under its own retries (529 counter seeded, M4.9)."""
        model_metrics.record_fallback(self.model, "nonstreaming")
        log.warning(
            "stream_failed_nonstreaming_fallback",
            request_id=request_id,
            error_type=error_type_label(failure),
            message=failure.message[:200],
        )
        state = RetryState(consecutive_529=1 if failure.overloaded else 0)
        state.attempt = 0
        response = await self._with_retry(state, self._create_nonstreaming)
        if not isinstance(response, dict):
            return response
        content = response.get("content")
        message = AssistantMessage(
            type="assistant",
            message=AssistantPayload.model_validate(
                {**response, "content": normalize_content_from_api(_blocks(content))}
            ),
            uuid=self.ids(),
            timestamp=self.clock(),
            request_id=request_id,
        )
        usage = response.get("usage")
        usage_model = response.get("model") if isinstance(response.get("model"), str) else self.model
        answered = self._inflight(request_id, "answered", usage if isinstance(usage, dict) else None, str(usage_model))
        self.publisher.record(answered)
        result = CallResult(
            outcome="ok",
            model=self.model,
            request_id=request_id,
            usage=usage if isinstance(usage, dict) else None,
            response_model=response.get("model") if isinstance(response.get("model"), str) else None,  # type: ignore[arg-type]
            response_id=response.get("id") if isinstance(response.get("id"), str) else None,  # type: ignore[arg-type]
            stop_reason=response.get("stop_reason") if isinstance(response.get("stop_reason"), str) else None,  # type: ignore[arg-type]
            attempts=self.attempts,
            time_to_first_chunk_s=self.first_chunk_s,
            tool_use=any(block.type == "tool_use" for block in message.blocks),
        )
        self.received.append(result)
        await self.publisher.publish(
            [(f"model:{request_id}:reply", AssistantReply(message=message, request_seq=self.publisher.request_seq))]
        )
        self.received.pop()
        return result

    async def _create_nonstreaming(self) -> JsonObject:
        params = non_streaming_fallback_params(self._params(), timeout_s=self.settings.nonstreaming_timeout_s)
        message = await self._create(_with_client_request_id(params, str(uuid.uuid4())))
        return cast(JsonObject, message.to_dict())

    def _create(self, params: JsonObject, **options: Any) -> Awaitable[Any]:
        """``messages.create(**params, **options)``; a request that needs betas (system-role messages,
        ``model/betas.py``) goes to the beta Messages API naming them, as Claude Code sends it. Both return
        the same stream (``AsyncStream`` of raw events) or message, read the same way."""
        betas = required_betas(request_body(params))
        if betas:
            return self.client.beta.messages.create(**cast(Any, params), betas=betas, **options)
        return self.client.messages.create(**cast(Any, params), **options)

    # -- retries (M4) -------------------------------------------------------------------------------

    async def _with_retry(self, state: RetryState, attempt: Callable[[], Awaitable[T]]) -> T | SwitchModel | GiveUp:
        while True:
            state.attempt += 1
            self.attempts += 1
            try:
                return await attempt()
            except (anthropic.APIError, OSError, TimeoutError) as error:
                failure = failure_of(error)
            decision = self._decide(failure, state)
            if not isinstance(decision, Retry):
                return decision
            if state.max_tokens_override is not None:
                self.params = with_max_tokens(self.params, state.max_tokens_override)  # M4.11
                state.max_tokens_override = None
            model_metrics.record_retry(self.model, error_type_label(failure))
            if self.on_retry is not None:
                self.on_retry(failure, state.attempt, decision.delay_ms)
            if decision.notify:
                await self._announce_retry(failure, decision, state)
            await self.sleep(decision.delay_ms / 1000)

    def _decide(self, failure: ApiFailure, state: RetryState) -> Decision:
        return decide(
            failure,
            state,
            policy=self.policy,
            model=self.model,
            fallback_model=self.fallback_model,
            jitter=self.jitter(),
            thinking_budget=thinking_budget(request_body(self.params).get("thinking")),
        )

    async def _announce_retry(self, failure: ApiFailure, decision: Retry, state: RetryState) -> None:
        """M4.4: the ``api_error`` system message yielded before each backoff sleep."""
        error: JsonObject = {"status": failure.status, "message": failure.message}
        if failure.body is not None:
            error["error"] = failure.body
        notice = ApiErrorSystemMessage(
            type="system",
            subtype="api_error",
            level="error",
            error=error,
            retry_in_ms=decision.delay_ms,
            retry_attempt=state.attempt,
            max_retries=self.policy.max_retries,
            uuid=self.ids(),
            timestamp=self.clock(),
        )
        await self.publisher.publish([(f"model:{self.call_id}:retry:{self.attempts}", SystemNotice(message=notice))])

    # -- giving up, switching model --------------------------------------------------------------------

    async def _switch_model(self, switch: SwitchModel) -> None:
        """M6.3: warn (the models by their display names), then repeat the request on the fallback model.

        Step 2 (``Model fallback triggered`` results for the tool_uses collected in this call) has nothing to
        answer here, as in Claude Code: a switch raised while opening the stream comes before any block of the
        call, and after a broken stream Claude Code tombstones the partial messages at the first message the
        loop receives (M5.3) — the non-streaming fallback's first overload yields its M4.4 retry message
        (counter 1 → 2) before the third overload can switch (M4.9, ``MAX_529_RETRIES`` = 3). The worker
        tombstones them when the stream breaks (``_abandon_stream``): the same history, in which no tool_use
        is left without its result."""
        model_metrics.record_fallback(switch.original, "model")
        log.warning("model_fallback", original=switch.original, fallback=switch.fallback)
        notice = create_informational_message(
            switched_model_notice(switch.fallback, switch.original), level="warning", clock=self.clock, ids=self.ids
        )
        await self.publisher.publish([(f"model:{self.call_id}:switch:{self.attempts}", SystemNotice(message=notice))])
        self.params = with_model(self.params, switch.fallback)
        self.model = switch.fallback
        self.fallback_model = None
        self.switched_to = switch.fallback

    async def _give_up(self, outcome: GiveUp) -> CallResult:
        """M7: the synthetic assistant error, answered atomically with the in-flight record."""
        error = assistant_error_for(outcome, model=self.model)
        message = create_assistant_api_error_message(
            error.text, error=error.error, error_details=error.error_details, clock=self.clock, ids=self.ids
        )
        request_id = self.request_id or self.call_id
        self.publisher.record(self._inflight(request_id, "answered"))
        await self.publisher.publish(
            [(f"model:{self.call_id}:error", AssistantReply(message=message, request_seq=self.publisher.request_seq))]
        )
        log.warning("model_call_failed", reason=outcome.reason, text=error.text[:200], attempts=self.attempts)
        return CallResult(
            outcome="api_error",
            model=self.model,
            request_id=self.request_id,
            error_type=error_type_label(outcome.failure),
            attempts=self.attempts,
            time_to_first_chunk_s=self.first_chunk_s,
        )

    async def end_abandoned(self, error: BaseException) -> None:
        """The call was abandoned on its notice's last delivery (its writes never landed, or a bug raised): no
        one would serve the request again, so this ends the turn as Claude Code's loop does when an exception
        escapes the model call (M7.4): an assistant error whose text is the raw error message. What the call
        streamed is tombstoned first (R6.1), so no partial block or tool_use stays live."""
        publisher = self.publisher.fresh()
        entries: list[tuple[str, IngressPayload]] = []
        if self.request_id is not None:
            entries.append((f"model:{self.request_id}:fallback", StreamFallback(request_id=self.request_id)))
        message = create_assistant_api_error_message(str(error), clock=self.clock, ids=self.ids)
        entries.append(
            (f"model:{self.call_id}:abandoned", AssistantReply(message=message, request_seq=publisher.request_seq))
        )
        publisher.record(self._inflight(self.request_id or self.call_id, "answered"))
        await publisher.publish(entries)
        log.error("model_call_abandoned", request_id=self.request_id, error=repr(error)[:200])

    # -- helpers -----------------------------------------------------------------------------------------

    def _params(self) -> JsonObject:
        return self.params

    def _inflight(
        self, request_id: str, state: str, usage: JsonObject | None = None, usage_model: str | None = None
    ) -> JsonObject:
        """The in-flight record. An answered call's carries its usage and billed model: a worker that dies
        between the reply's last event and recording the usage leaves it there, and the worker that takes
        the request notice over records it (deduplicated by ``request_id``, worker.py ``_recover_usage``)."""
        record: JsonObject = {"request_id": request_id, "seq": self.publisher.request_seq, "state": state}
        record["owner"] = self.owner
        if usage is not None:
            record["usage"] = usage
            record["usage_model"] = usage_model
        if self.switched_to is not None:
            record["fallback_model"] = self.switched_to  # M6.3.1: the rest of the turn stays on it
        return record
