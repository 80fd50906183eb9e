"""Streaming accumulation (§9, R9.1–R9.7, R9.9) and the fallback tombstones it owns (R6.1).

:class:`StreamAccumulator` is fed the raw Anthropic stream events of one model call, one at a time,
and returns what Claude Code yields for each: at ``content_block_stop`` one :class:`AssistantMessage`
per content block (all blocks of a response share ``message.id`` and ``requestId``, each has its own
uuid), and after every event a :class:`StreamEventMessage` carrying the raw event (R9.6).

R9.5 says Claude Code *mutates* the last emitted message when ``message_delta`` brings the final usage
and stop_reason. Our messages are frozen, so the accumulator instead returns an
:class:`AssistantMessageUpdated` holding the replacement (same uuid); :func:`apply_assistant_update`
applies it to a message list, and a transcript writer rewrites that line.

Strictness beyond Claude Code (bad input is never silently accepted here): events after
``message_stop`` or after an ``error`` event, a second ``message_start``, ``content_block_start``/
``message_delta``/``message_stop`` before ``message_start``, a reused block index, a delta or stop
for an already stopped block, and malformed event fields all raise :class:`StreamAccumulationError`.
Unknown top-level event types (and ``ping``) and unknown delta types are passed through as
``stream_event`` only. An ``error`` event is what the SDK turns into a thrown
stream error, so it yields nothing (not even a ``stream_event``); it is kept as :attr:`stream_error`.
Any failure makes :meth:`StreamAccumulator.needs_fallback` true, as a throwing stream does in Claude
Code (R9.9); the caller then emits :meth:`StreamAccumulator.fallback_tombstones` (R6.1).

:func:`agentbus_redis.messages.from_api.normalize_content_from_api` (R9.7) turns each finished block into its
stored form; :mod:`agentbus_redis.streaming.usage` holds the usage merge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Literal, NoReturn

from pydantic import ValidationError

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import ContentNormalizationError, StreamAccumulationError, UpdateTargetMissing
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import (
    API_ERROR_MESSAGE_PREFIX,
    CONTEXT_WINDOW_EXCEEDED_ERROR,
    max_output_tokens_error,
)
from agentbus_redis.messages.factories import create_assistant_api_error_message
from agentbus_redis.messages.from_api import normalize_content_from_api
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AssistantPayload,
    Message,
    StreamEventMessage,
    TombstoneMessage,
)
from agentbus_redis.messages.tombstones import tombstones_for
from agentbus_redis.streaming.usage import EMPTY_USAGE, update_usage
from agentbus_redis.wire import CamelModel

REFUSAL_SUGGESTED_MODEL = "claude-sonnet-4-20250514"


def refusal_error_text(model: str, *, interactive: bool = True) -> str:
    """R9.5 ``refusal``: the Usage Policy text. The spec names it but does not quote it; this is the
    v2.1.88 source text (api/errors.ts ``getErrorMessageIfRefusal``), interactive or headless variant,
    plus the model-switch hint unless ``model`` already is the suggested one."""
    policy = (
        f"{API_ERROR_MESSAGE_PREFIX}: Claude Code is unable to respond to this request, which appears to violate "
        "our Usage Policy (https://www.anthropic.com/legal/aup). "
    )
    advice = (
        "Please double press esc to edit your last message or start a new session for Claude Code to assist "
        "with a different task."
        if interactive
        else "Try rephrasing the request or attempting a different approach."
    )
    hint = (
        f" If you are seeing this refusal repeatedly, try running /model {REFUSAL_SUGGESTED_MODEL} to switch models."
        if model != REFUSAL_SUGGESTED_MODEL
        else ""
    )
    return policy + advice + hint


class AssistantMessageUpdated(CamelModel):
    """R9.5 as a value: ``message`` replaces the already emitted assistant message with the same uuid
    (its ``message.usage`` and ``message.stop_reason`` now final). Not a wire message."""

    type: Literal["assistant_message_updated"] = "assistant_message_updated"
    message: AssistantMessage


StreamOutput = AssistantMessage | AssistantMessageUpdated | StreamEventMessage
"""What :meth:`StreamAccumulator.feed` returns, in yield order."""


def apply_assistant_update(messages: Sequence[Message], update: AssistantMessageUpdated) -> list[Message]:
    """Replace the assistant message whose uuid ``update`` names (the R9.5 in-place mutation)."""
    target = update.message.uuid
    for index in range(len(messages) - 1, -1, -1):
        current = messages[index]
        if isinstance(current, AssistantMessage) and current.uuid == target:
            return [*messages[:index], update.message, *messages[index + 1 :]]
    raise UpdateTargetMissing(target)


def _start_block(content_block: Mapping[str, Any]) -> dict[str, Any]:
    """R9.2: the accumulator for a new block (text in the start event is dropped: the SDK repeats it)."""
    block = dict(content_block)
    kind = block["type"]
    if kind in ("tool_use", "server_tool_use"):
        block["input"] = ""
    elif kind == "text":
        block["text"] = ""
    elif kind == "thinking":
        block["thinking"] = ""
        block["signature"] = ""
    return block


_DELTA_TARGETS: dict[str, tuple[tuple[str, ...], str, str]] = {
    "text_delta": (("text",), "text", "Content block is not a text block"),
    "thinking_delta": (("thinking",), "thinking", "Content block is not a thinking block"),
    "signature_delta": (("thinking",), "signature", "Content block is not a thinking block"),
    "input_json_delta": (("tool_use", "server_tool_use"), "partial_json", "Content block is not a input_json block"),
}
"""R9.3: delta type → (block types it applies to, its payload field, Claude Code's mismatch message)."""


def _elapsed_ms(start: datetime, end: str) -> float:
    return (datetime.fromisoformat(end) - start).total_seconds() * 1000


class StreamAccumulator:
    """Accumulates the events of one streaming attempt (R9.1–R9.6); see the module docstring.

    ``max_output_tokens`` is the request's output cap (quoted by the ``max_tokens`` error),
    ``request_model`` the model asked for (refusal hint; defaults to the model of ``message_start``),
    ``interactive`` picks the refusal wording, ``started_at`` (a timestamp from ``clock`` taken when the
    request was sent) enables ``ttftMs`` on the ``message_start`` stream event. ``stream_events=False``
    leaves the R9.6 stream-event messages out of :meth:`feed`'s outputs, for a caller that logs none of them
    and feeds events already validated as JSON (ingestion's ledger: a ``StreamEvent.event`` is a
    ``JsonObject``); building one per event was ~7% of ingestion's CPU.
    """

    def __init__(
        self,
        *,
        max_output_tokens: int,
        request_id: str | None = None,
        request_model: str | None = None,
        interactive: bool = True,
        advisor_model: str | None = None,
        started_at: str | None = None,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        stream_events: bool = True,
    ) -> None:
        self._stream_events = stream_events
        self._max_output_tokens = max_output_tokens
        self._request_id = request_id
        self._request_model = request_model
        self._interactive = interactive
        self._advisor_model = advisor_model
        self._started_at = datetime.fromisoformat(started_at) if started_at is not None else None
        self._clock = clock
        self._ids = ids
        self._event_index = -1
        self._partial: dict[str, Any] | None = None
        self._partial_payload: AssistantPayload | None = None
        """``_partial`` validated (with an empty content), which each block message copies (see ``_on_block_stop``)."""
        self._blocks: dict[int, dict[str, Any]] = {}
        self._stopped: set[int] = set()
        self._block_messages: list[AssistantMessage] = []
        self._emitted: list[AssistantMessage] = []
        self._usage: JsonObject = dict(EMPTY_USAGE)
        self._stop_reason: str | None = None
        self._finished = False
        self._stream_error: JsonObject | None = None
        self._failure: StreamAccumulationError | None = None

    @property
    def emitted(self) -> tuple[AssistantMessage, ...]:
        """Every assistant message yielded so far (block messages and API errors), latest versions."""
        return tuple(self._emitted)

    @property
    def last_block_message(self) -> AssistantMessage | None:
        """The latest block message yielded (latest version): what a ``message_delta`` updates (R9.5)."""
        return self._block_messages[-1] if self._block_messages else None

    @property
    def usage(self) -> JsonObject:
        """The accumulated usage (Claude Code's ``updateUsage`` over message_start and message_delta)."""
        return dict(self._usage)

    @property
    def stop_reason(self) -> str | None:
        return self._stop_reason

    @property
    def stream_error(self) -> JsonObject | None:
        """The ``error`` object of an ``error`` event, if the stream reported one (the SDK throws on it)."""
        return self._stream_error

    def is_incomplete(self) -> bool:
        """R9.9: the stream ended without ``message_start``, or with it but with neither a completed
        block nor a stop_reason (a legitimately empty response has a stop_reason)."""
        return self._partial is None or (not self._block_messages and not self._stop_reason)

    @property
    def failure(self) -> StreamAccumulationError | None:
        """The error :meth:`feed` raised, if any (the attempt is then dead, like a throwing stream)."""
        return self._failure

    def needs_fallback(self) -> bool:
        """R9.9: this attempt must be retried without streaming: the stream failed (an ``error`` event or
        an event that could not be accumulated) or ended incomplete."""
        return self._stream_error is not None or self._failure is not None or self.is_incomplete()

    def fallback_tombstones(self) -> list[TombstoneMessage]:
        """R6.1: a tombstone for every assistant message already yielded by this attempt."""
        return tombstones_for(self._emitted)

    def feed(self, event: object) -> list[StreamOutput]:
        """Accumulate one raw stream event and return what Claude Code yields for it.

        Raises :class:`StreamAccumulationError` for an event that cannot be accumulated. Claude Code
        treats such a throw like any stream error (R9.9), so the accumulator then stays failed:
        :meth:`needs_fallback` is true and every later event raises again.
        """
        if self._failure is not None:
            raise StreamAccumulationError(
                f"accumulator already failed at event #{self._failure.event_index}",
                event_index=self._event_index + 1,
                event_type=event.get("type") if isinstance(event, dict) else None,
            )
        try:
            return self._feed(event)
        except StreamAccumulationError as failure:
            self._failure = failure
            raise

    def _feed(self, event: object) -> list[StreamOutput]:
        self._event_index += 1
        if not isinstance(event, dict):
            self._fail(None, f"event is not a JSON object ({type(event).__name__})")
        kind = event.get("type")
        if not isinstance(kind, str):
            self._fail(None, "event has no string 'type'")
        if self._stream_error is not None:
            self._fail(kind, "event after an 'error' event")
        if self._finished:
            self._fail(kind, "event after message_stop")
        passthrough = self._stream_event(event, kind) if self._stream_events else None
        outputs: list[StreamOutput] = []
        # Deltas first: most of a stream's events are deltas (the kinds are distinct, so the order decides nothing).
        if kind == "content_block_delta":
            self._on_block_delta(event)
        elif kind == "message_start":
            self._on_message_start(event)
            if passthrough is not None:
                passthrough = self._with_ttft(passthrough)
        elif kind == "content_block_start":
            self._on_block_start(event)
        elif kind == "content_block_stop":
            outputs.append(self._on_block_stop(event))
        elif kind == "message_delta":
            outputs.extend(self._on_message_delta(event))
        elif kind == "message_stop":
            self._require_started(kind)
            self._finished = True
        elif kind == "error":
            error = event.get("error")
            self._stream_error = error if isinstance(error, dict) else {"error": error}
            return []
        if passthrough is not None:
            outputs.append(passthrough)
        return outputs

    def _fail(self, kind: str | None, reason: str) -> NoReturn:
        raise StreamAccumulationError(reason, event_index=self._event_index, event_type=kind)

    def _require_started(self, kind: str) -> dict[str, Any]:
        if self._partial is None:
            self._fail(kind, f"{kind} before message_start")
        return self._partial

    def _index(self, event: dict[str, Any], kind: str) -> int:
        index = event.get("index")
        if not isinstance(index, int) or isinstance(index, bool) or index < 0:
            self._fail(kind, f"'index' must be a non-negative integer, got {index!r}")
        return index

    def _on_message_start(self, event: dict[str, Any]) -> None:
        """R9.1: remember the partial message (id, model, initial usage, stop_reason null)."""
        if self._partial is not None:
            self._fail("message_start", "duplicate message_start")
        message = event.get("message")
        if not isinstance(message, dict):
            self._fail("message_start", "'message' is not an object")
        try:
            self._partial_payload = AssistantPayload.model_validate({**message, "content": []})
        except ValidationError as error:
            self._fail("message_start", f"invalid message: {error}")
        self._partial = dict(message)
        usage = message.get("usage")
        self._usage = update_usage(self._usage, usage if isinstance(usage, dict) else None)

    def _on_block_start(self, event: dict[str, Any]) -> None:
        """R9.2."""
        self._require_started("content_block_start")
        index = self._index(event, "content_block_start")
        block = event.get("content_block")
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            self._fail("content_block_start", "'content_block' is not an object with a string 'type'")
        if index in self._blocks:
            self._fail("content_block_start", f"duplicate content block index {index}")
        self._blocks[index] = _start_block(block)

    def _open_block(self, event: dict[str, Any], kind: str) -> tuple[int, dict[str, Any]]:
        index = self._index(event, kind)
        block = self._blocks.get(index)
        if block is None:
            self._fail(kind, f"Content block not found (index {index})")
        if index in self._stopped:
            self._fail(kind, f"content block {index} is already stopped")
        return index, block

    def _on_block_delta(self, event: dict[str, Any]) -> None:
        """R9.3: append text/thinking/partial JSON; a signature replaces; citations are ignored."""
        kind = "content_block_delta"
        _, block = self._open_block(event, kind)
        delta = event.get("delta")
        if not isinstance(delta, dict) or not isinstance(delta.get("type"), str):
            self._fail(kind, "'delta' is not an object with a string 'type'")
        delta_type = delta["type"]
        target = _DELTA_TARGETS.get(delta_type)
        if target is None:
            # citations_delta, and delta types newer than this code (e.g. connector_text_delta): Claude
            # Code's switch ignores them, and so do we — the raw event still passes through (R9.6).
            return
        block_types, payload_field, mismatch = target
        if block["type"] not in block_types:
            self._fail(kind, f"{mismatch} ({delta_type} on a {block['type']} block)")
        payload = delta.get(payload_field)
        if not isinstance(payload, str):
            self._fail(kind, f"{delta_type} has no string {payload_field!r}")
        if delta_type == "signature_delta":
            block["signature"] = payload
        elif delta_type == "input_json_delta":
            if not isinstance(block.get("input"), str):
                self._fail(kind, "Content block input is not a string")
            block["input"] += payload
        else:
            block[payload_field] += payload

    def _on_block_stop(self, event: dict[str, Any]) -> AssistantMessage:
        """R9.4: one assistant message for the finished block, sharing the partial message's id."""
        kind = "content_block_stop"
        self._require_started(kind)
        index, block = self._open_block(event, kind)
        try:
            content = normalize_content_from_api([block])
        except ContentNormalizationError as error:
            self._fail(kind, error.reason)
        self._stopped.add(index)
        extra: dict[str, str] = {}
        if self._request_id is not None:
            extra["request_id"] = self._request_id
        if self._advisor_model:
            extra["advisor_model"] = self._advisor_model
        # The partial message validated at message_start with this block's content: what validating
        # ``{**partial, "content": content}`` again gives (``partial`` never changes after message_start, the
        # blocks are validated already and ``content`` counted as set then too), without validating it again
        # per block (~4 µs). The copy is shallow: the block messages share the partial's nested values, which
        # nothing changes in place (R9.5's final usage replaces ``usage`` in a copy).
        payload = self._partial_payload
        if payload is None:  # unreachable: set with ``_partial``
            self._fail(kind, "content_block_stop before message_start")
        message = AssistantMessage(
            type="assistant",
            message=payload.model_copy(update={"content": content}),
            uuid=self._ids(),
            timestamp=self._clock(),
            **extra,
        )
        self._block_messages.append(message)
        self._emitted.append(message)
        return message

    def _on_message_delta(self, event: dict[str, Any]) -> list[StreamOutput]:
        """R9.5: final usage and stop_reason onto the last block message, then the stop-reason errors."""
        kind = "message_delta"
        partial = self._require_started(kind)
        delta = event.get("delta")
        if not isinstance(delta, dict):
            self._fail(kind, "'delta' is not an object")
        stop_reason = delta.get("stop_reason")
        if stop_reason is not None and not isinstance(stop_reason, str):
            self._fail(kind, f"'stop_reason' must be a string or null, got {stop_reason!r}")
        usage = event.get("usage")
        self._usage = update_usage(self._usage, usage if isinstance(usage, dict) else None)
        self._stop_reason = stop_reason
        outputs: list[StreamOutput] = []
        if self._block_messages:
            outputs.append(self._replace_last(stop_reason))
        error = self._stop_reason_error(stop_reason, partial)
        if error is not None:
            self._emitted.append(error)
            outputs.append(error)
        return outputs

    def _replace_last(self, stop_reason: str | None) -> AssistantMessageUpdated:
        last = self._block_messages[-1]
        payload = last.message.model_copy(update={"usage": dict(self._usage), "stop_reason": stop_reason})
        updated = last.model_copy(update={"message": payload})
        self._block_messages[-1] = updated
        self._emitted = [updated if message is last else message for message in self._emitted]
        return AssistantMessageUpdated(message=updated)

    def _stop_reason_error(self, stop_reason: str | None, partial: dict[str, Any]) -> AssistantMessage | None:
        """R9.5: ``refusal``, ``max_tokens`` and ``model_context_window_exceeded`` each add an API error."""
        if stop_reason == "refusal":
            model = self._request_model if self._request_model is not None else str(partial.get("model") or "")
            return create_assistant_api_error_message(
                refusal_error_text(model, interactive=self._interactive),
                error="invalid_request",
                clock=self._clock,
                ids=self._ids,
            )
        if stop_reason in ("max_tokens", "model_context_window_exceeded"):
            text = (
                max_output_tokens_error(self._max_output_tokens)
                if stop_reason == "max_tokens"
                else CONTEXT_WINDOW_EXCEEDED_ERROR
            )
            return create_assistant_api_error_message(
                text, api_error="max_output_tokens", error="max_output_tokens", clock=self._clock, ids=self._ids
            )
        return None

    def _stream_event(self, event: dict[str, Any], kind: str) -> StreamEventMessage:
        """R9.6 / R1.7: the raw event, validated as JSON before it changes any state."""
        try:
            return StreamEventMessage(type="stream_event", event=event)
        except ValidationError as error:
            self._fail(kind, f"event is not JSON: {error}")

    def _with_ttft(self, passthrough: StreamEventMessage) -> StreamEventMessage:
        """R1.7: ``ttftMs`` only on message_start, measured from ``started_at`` when given."""
        if self._started_at is None:
            return passthrough
        return passthrough.model_copy(update={"ttft_ms": _elapsed_ms(self._started_at, self._clock())})
