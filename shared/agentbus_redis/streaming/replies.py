"""Streaming replies as ingestion keeps them between batches.

An :class:`OpenReply` wraps the :class:`~agentbus_redis.streaming.accumulate.StreamAccumulator` of one model call and is
persisted with the session's ledger: the raw events seen so far (to rebuild the accumulator after a
restart or a shard takeover) and the messages already logged (their uuids must not change).

The last finished block is *held back* until ``message_delta``/``message_stop`` arrive, so the logged
message already carries the final ``usage`` and ``stop_reason``: the in-place mutation of R9.5, which in
Claude Code reaches disk only if it wins a 100 ms race (§12), becomes deterministic here.
"""

from __future__ import annotations

from typing import NamedTuple

from pydantic import Field, PrivateAttr

from agentbus_redis.clock import Clock
from agentbus_redis.ids import IdSource
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.streaming.accumulate import AssistantMessageUpdated, StreamAccumulator
from agentbus_redis.wire import WireHolder

DEFAULT_MAX_OUTPUT_TOKENS = 32_000


class ReplyProgress(NamedTuple):
    """What one event changed: messages now final (to log), and whether the reply is complete. (A named
    tuple: one is made per stream event, at half the cost of a frozen dataclass.)"""

    completed: list[AssistantMessage]
    finished: bool
    all_messages: list[AssistantMessage]
    held_changed: bool = True
    """Whether the held-back message changed (False: the event only added to ``events``)."""


class OpenReply(WireHolder):
    """One streaming reply in progress (see the module docstring)."""

    request_id: str
    parent_before: str | None = None
    """The chain parent before the reply started; restored when a fallback retracts it (R6.1)."""
    execute_tools: bool = True
    max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
    events: list[JsonObject] = Field(default_factory=list)
    logged: list[AssistantMessage] = Field(default_factory=list)
    held: AssistantMessage | None = None

    _accumulator: StreamAccumulator | None = PrivateAttr(default=None)

    def feed(
        self, event: JsonObject, *, clock: Clock, ids: IdSource, withhold_stop_error: bool = False
    ) -> ReplyProgress:
        """Accumulate ``event``; raises :class:`~agentbus_redis.errors.StreamAccumulationError` for bad input.

        ``withhold_stop_error``: the ``max_output_tokens`` API error the event's stop reason brings (R9.5,
        M8.3/M8.4) is withheld — not logged — because the loop recovers from the cut (M8.5)."""
        accumulator = self._accumulator_for(clock, ids)
        last_before = accumulator.last_block_message
        outputs = accumulator.feed(event)
        self.events.append(event)
        completed: list[AssistantMessage] = []
        held_before = self.held
        for output in outputs:
            if withhold_stop_error and isinstance(output, AssistantMessage) and _is_output_limit_error(output):
                continue
            if isinstance(output, AssistantMessage):
                if self.held is not None:
                    completed.append(self.held)
                self.held = output
            elif isinstance(output, AssistantMessageUpdated) and self.held is not None:
                self.held = _final(self.held, output.message, replaced=last_before)
        finished = event.get("type") == "message_stop"
        if finished and self.held is not None:
            completed.append(self.held)
            self.held = None
        self.logged.extend(completed)
        return ReplyProgress(
            completed=completed,
            finished=finished,
            all_messages=list(self.logged),
            held_changed=self.held is not held_before,
        )

    def emitted_messages(self) -> list[AssistantMessage]:
        """The messages of this attempt that reached the log (what a fallback must tombstone)."""
        return list(self.logged)

    def _accumulator_for(self, clock: Clock, ids: IdSource) -> StreamAccumulator:
        # Read from the private store itself: ``self._accumulator`` goes through pydantic's ``__getattr__``,
        # whose descriptor probe raises and catches an AttributeError on every access (~2 µs, once per event).
        private = self.__pydantic_private__
        cached: StreamAccumulator | None = private.get("_accumulator") if private is not None else None
        if cached is not None:
            return cached
        accumulator = StreamAccumulator(
            max_output_tokens=self.max_output_tokens,
            request_id=self.request_id,
            clock=clock,
            ids=ids,
            stream_events=False,  # never logged; the events are validated JSON (StreamEvent, or our list)
        )
        # After a restart: replay what was seen; its outputs were logged (or held) already.
        for past in self.events:
            accumulator.feed(past)
        self._accumulator = accumulator
        return accumulator


def _is_output_limit_error(message: AssistantMessage) -> bool:
    """The M8.3/M8.4 error of a cut reply (``apiError: max_output_tokens``), which the loop may withhold."""
    return bool(message.is_api_error_message) and message.api_error == "max_output_tokens"


def _final(held: AssistantMessage, updated: AssistantMessage, *, replaced: AssistantMessage | None) -> AssistantMessage:
    """``held`` with the R9.5 fields of ``updated``, the accumulator's update of ``replaced``. When ``held`` is
    ``replaced`` itself (not a copy read back after a restart) and its ``stop_sequence`` counts as set, that
    update already is the copy :func:`_with_final_usage` would make: the same fields, values and set fields
    (two ``model_copy`` calls fewer per reply)."""
    if held is replaced and "stop_sequence" in updated.message.model_fields_set:
        return updated
    return _with_final_usage(held, updated)


def _with_final_usage(held: AssistantMessage, updated: AssistantMessage) -> AssistantMessage:
    """Copy the R9.5 fields (usage, stop_reason, stop_sequence) of ``updated`` onto ``held``."""
    payload = held.message.model_copy(
        update={
            "usage": updated.message.usage,
            "stop_reason": updated.message.stop_reason,
            "stop_sequence": updated.message.stop_sequence,
        }
    )
    return held.model_copy(update={"message": payload})
