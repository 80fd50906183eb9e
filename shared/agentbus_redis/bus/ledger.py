"""Ingestion rules: one session's ledger turns ingress payloads into canonical log entries.

The ledger is the pure heart of the ingestion worker. Per session it holds the sequence counter, the
chain cursor (R7.8), the tool calls still waiting for a result, open streaming replies and a pending
interrupt. It never does I/O; the worker loads and saves :class:`LedgerState` around each batch.

Rules enforced at this boundary:
- every logged message gets its ``seq`` and ``parentUuid`` here (ingestion is the log's only writer);
- a reply's tool_use blocks become one :class:`ToolJob`, unless the producer supplies the results;
- a stream fallback tombstones the partial messages of the failed attempt (R6.1) and their calls never run;
- placeholder rule: no tool_use stays unpaired forever — a call past its deadline, or whose job was
  abandoned, is answered with an ``is_error`` result carrying the placeholder text;
- a second result for an answered call, or a result for a retracted call, is dropped (reported);
- live producers' messages are checked before they are logged: a prompt, reply or tool result with a
  malformed block, or a tool result that answers no call of the session, is bad input (dead-lettered);
  recorded messages (replay) are logged as recorded; a replayed recording's messages never make the model
  due (their entries are marked ``replayed``; the session stays idle);
- interrupts: R10.1 while a reply streams, R10.2 while tools run, R10.1 with nothing collected while the
  model is due (a request pending, nothing streamed yet); an interrupt while the session is idle (its last
  turn over) writes nothing, as in Claude Code, where no query runs then (``bus/turn_state.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import Field

from agentbus_redis.approvals.ledger import ApprovalBook, ApprovalRules
from agentbus_redis.approvals.records import ApprovalAnswer, ApprovalContinuation, ApprovalRequested
from agentbus_redis.bus.events import (
    AssistantReply,
    AttachmentNotice,
    DeadlineSweep,
    IngressEnvelope,
    IngressPayload,
    Interrupt,
    LogEntry,
    PiMessagePayload,
    RecordedMessage,
    StreamEvent,
    StreamFallback,
    StuckTurnSweep,
    SystemNotice,
    ToolJob,
    ToolJobAbandoned,
    ToolProgressReport,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.interrupts import InterruptReason, stronger_reason
from agentbus_redis.bus.queued_prompts import turn_open_after
from agentbus_redis.bus.stuck_turns import WaitingFor, session_wait, stuck_at_ms, stuck_wait
from agentbus_redis.bus.turn_state import model_due_after, turn_failed_after
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import StreamAccumulationError
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.chain_cursor import ChainCursor
from agentbus_redis.messages.constants import INTERRUPTED_BY_USER, SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock, is_malformed
from agentbus_redis.messages.envelope import StoredMessageBase
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_user_interruption_message,
    create_user_message,
)
from agentbus_redis.messages.kinds import AssistantMessage, Message, ProgressMessage, TombstoneMessage, UserMessage
from agentbus_redis.model.error_texts import REQUEST_TIMED_OUT
from agentbus_redis.pi.ingress import pi_message_to_claude_code
from agentbus_redis.streaming.replies import OpenReply
from agentbus_redis.wire import WireHolder, field_or_none


class PendingToolUse(WireHolder):
    """A call that has no result yet."""

    assistant_uuid: str
    deadline_ms: int | None
    """None: the producer supplies the result (replay); no placeholder deadline applies."""
    dispatched: bool = False
    """True when a tool job was handed out for it (so an interrupt must reach the tool workers)."""
    name: str | None = None
    """The tool's name (an ``Agent`` call waits for a child: bus/stuck_turns.py)."""


class LedgerState(WireHolder):
    """Everything ingestion remembers about one session between batches (persisted as JSON)."""

    session_id: str
    seq: int = 0
    chain_parent: str | None = None
    pending: dict[str, PendingToolUse] = Field(default_factory=dict)
    closed_tool_use_ids: set[str] = Field(default_factory=set)
    retracted_uuids: set[str] = Field(default_factory=set)
    retracted_tool_use_ids: set[str] = Field(default_factory=set)
    """Calls of tombstoned messages: they never run, and a result for one is dropped."""
    interrupt_reason: str | None = None
    """Set while dispatched tools finish after an interrupt (R10.2)."""
    interrupted_seq: int | None = None
    """The log seq when the last interrupt was applied: a model reply to a request built at or before it (its
    ``request_seq``) belongs to the interrupted turn and is dropped."""
    open_replies: dict[str, OpenReply] = Field(default_factory=dict)
    awaiting_model: bool = False
    """The model is due: a prompt came, or every call of the latest round has its result, and no reply has
    begun (``bus/turn_state.py``). An interrupt then ends the turn with R10.1's text; when False and
    nothing streams or runs, the session is idle and an interrupt writes nothing."""
    approvals: ApprovalBook = Field(default_factory=ApprovalBook)
    """Calls parked for a person's approval (approvals/ledger.py, agent-loop.md §H)."""
    turn_open: bool = False
    """The model is due or answering, or tools run: a queued prompt waits (bus/queued_prompts.py)."""
    queued_prompts: list[UserPrompt] = Field(default_factory=list)
    """Queued prompts held until the turn is over, in arrival order."""
    last_progress_ms: int | None = None
    """When the session last made progress (a message logged, a job handed out, a reply streaming): what the
    stuck-turn sweep measures a wait from (bus/stuck_turns.py)."""
    last_turn_failed: bool = False
    """The latest turn ended with an API error message (M7): what the console lists as failed, until the next
    prompt."""


@dataclass(frozen=True, slots=True)
class Dropped:
    """An ingress payload (or part of one) that was deliberately not logged, and why."""

    reason: str
    detail: str


@dataclass(slots=True)
class LedgerOutput:
    """What applying one payload produced, for the worker to write atomically."""

    entries: list[LogEntry] = field(default_factory=list)
    tool_jobs: list[ToolJob] = field(default_factory=list)
    closed_tool_use_ids: list[str] = field(default_factory=list)
    retracted_uuids: list[str] = field(default_factory=list)
    interrupt_tools: bool = False
    interrupt_model: bool = False
    """An interrupt was applied: the model worker must abort the session's call in flight (published on the
    interrupts channel)."""
    interrupt_reason: InterruptReason = "user_cancel"
    """Why, when ``interrupt_tools`` or ``interrupt_model``: what the tool workers stop of the session's
    running calls (bus/interrupts.py, R8.9)."""
    dropped: list[Dropped] = field(default_factory=list)
    invalid: str | None = None
    """Set when the payload is bad input: the worker dead-letters the raw entry with this reason."""
    invalid_reason: str = "invalid_input"
    """The dead-letter reason of ``invalid`` (typed: e.g. ``approval_mismatch``)."""
    approval_jobs: list[ApprovalContinuation] = field(default_factory=list)
    """Continuations of parked calls for the tool workers (approvals/records.py)."""
    stuck_ended: WaitingFor | None = None
    """A stuck-turn sweep ended the session's wait for this (bus/stuck_turns.py): counted in a metric."""
    stuck_checked: bool = False
    """A stuck-turn sweep was applied (ended or not): the worker rewrites the session's stuck-at score."""
    state_changed: bool = True
    """False only when the payload changed nothing of the state but an open reply's raw ``events`` (a
    content delta): a store that keeps those apart need not write the state again."""

    def extend(self, other: LedgerOutput) -> None:
        self.entries += other.entries
        self.tool_jobs += other.tool_jobs
        self.closed_tool_use_ids += other.closed_tool_use_ids
        self.retracted_uuids += other.retracted_uuids
        if other.interrupt_tools or other.interrupt_model:
            was_interrupted = self.interrupt_tools or self.interrupt_model
            reason = other.interrupt_reason
            self.interrupt_reason = stronger_reason(self.interrupt_reason, reason) if was_interrupted else reason
        self.interrupt_tools = self.interrupt_tools or other.interrupt_tools
        self.interrupt_model = self.interrupt_model or other.interrupt_model
        self.dropped += other.dropped
        if self.invalid is None and other.invalid is not None:
            self.invalid, self.invalid_reason = other.invalid, other.invalid_reason
        self.approval_jobs += other.approval_jobs
        self.stuck_ended = self.stuck_ended or other.stuck_ended
        self.stuck_checked = self.stuck_checked or other.stuck_checked
        self.state_changed = self.state_changed or other.state_changed


def tool_uses_of(message: AssistantMessage) -> list[ToolUseBlock]:
    """The client tool calls of an assistant message, in order."""
    return [block for block in message.blocks if isinstance(block, ToolUseBlock)]


def tool_result_ids_of(message: UserMessage) -> list[str]:
    """The ids a user message answers, in order."""
    return [block.tool_use_id for block in message.blocks if isinstance(block, ToolResultBlock)]


def malformed_block_problem(message: UserMessage | AssistantMessage) -> str | None:
    """A block of a known API type missing a required field (``content.is_malformed``) can never be sent
    to the API (anthropic-api-rules §1): from a live producer it is bad input, named by its index."""
    for index, block in enumerate(message.blocks):
        if is_malformed(block):
            return f"content block {index} is a malformed {block.type!r} block"
    return None


class SessionLedger:
    """Applies ingress payloads of one session in order; see the module docstring for the rules."""

    def __init__(
        self,
        state: LedgerState,
        *,
        tool_deadline_ms: int = 600_000,
        stuck_bound_ms: int = 900_000,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
    ) -> None:
        self.state = state
        self._tool_deadline_ms = tool_deadline_ms
        self._stuck_bound_ms = stuck_bound_ms
        self._clock = clock
        self._ids = ids
        self._ingress_id: str | None = None
        self._now_ms = 0
        self._replaying = False
        """Set while a replayed recording's message is applied: its entries are marked ``replayed``."""

    def _approvals(self) -> ApprovalRules:
        return ApprovalRules(
            self.state.session_id, self.state.approvals, self.state.pending, tool_deadline_ms=self._tool_deadline_ms
        )

    # -- entry points -------------------------------------------------------------------------

    def apply(
        self,
        envelope: IngressEnvelope,
        *,
        now_ms: int,
        ingress_id: str | None = None,
        traceparent: str | None = None,
    ) -> LedgerOutput:
        """Apply one ingress payload (the caller has already dropped duplicate idempotency keys).

        ``ingress_id`` names the entry it came from on every log entry it produces; ``traceparent``
        (the span ingestion continued for it) replaces the envelope's on those entries.
        """
        self._ingress_id = ingress_id
        self._now_ms = now_ms
        out = LedgerOutput()
        payload = envelope.payload
        trace = traceparent if traceparent is not None else envelope.traceparent
        # A class pattern is an isinstance check, and a failing one against a pydantic model costs ~0.25 µs:
        # stream events, most of the entries, are matched first (the payload classes are disjoint).
        match payload:
            case StreamEvent():
                self._apply_stream_event(out, payload, now_ms, trace)
            case UserPrompt():
                prompt = self._prompt_message(payload)
                if (problem := malformed_block_problem(prompt)) is not None:
                    out.invalid = f"user_prompt: {problem}"
                elif payload.queued and self.state.turn_open:
                    self.state.queued_prompts.append(payload)
                else:
                    self._flush_queued(out, trace)
                    self._log(out, prompt, trace)
            case AssistantReply() if self._interrupted(payload.request_seq):
                out.dropped.append(Dropped("interrupted", f"reply to request seq {payload.request_seq}"))
            case AssistantReply():
                if (problem := malformed_block_problem(payload.message)) is not None:
                    out.invalid = f"assistant_message {payload.message.uuid}: {problem}"
                else:
                    self._apply_assistant(out, payload.message, payload.execute_tools, now_ms, trace)
            case StreamFallback():
                self._apply_fallback(out, payload.request_id, trace)
            case SystemNotice() | AttachmentNotice():
                self._log(out, payload.message, trace)
            case Interrupt():
                self._apply_interrupt(out, payload.reason, trace)
            case ToolProgressReport():
                self._apply_progress(out, payload.message, trace)
            case ToolResultReport():
                self._apply_tool_result(out, payload.message, trace, live=True)
            case ToolJobAbandoned():
                self._answer_with_placeholders(out, payload.tool_use_ids, trace)
            case RecordedMessage() if payload.replayed:
                self._apply_replayed(out, payload.message, now_ms, trace)
            case RecordedMessage():
                self._apply_recorded(out, payload.message, now_ms, trace)
            case PiMessagePayload():
                self._apply_pi(out, payload, now_ms, trace)
            case DeadlineSweep():
                out.extend(self.expire(now_ms=payload.now_ms))
            case StuckTurnSweep():
                self._apply_stuck_sweep(out, payload.now_ms, trace)
            case ApprovalRequested():
                self._approvals().park(payload, traceparent=trace)
            case ApprovalAnswer():
                self._apply_approval_answer(out, payload, trace)
        if _progress(payload, out):
            state = self.state
            # Set in the instance's dict, as pydantic's ``__setattr__`` does for a field of a model that does not
            # validate assignments (a ``WireHolder``'s fields all count as set already): once per entry applied.
            state.__dict__["last_progress_ms"] = max(state.last_progress_ms or 0, now_ms)
        return out

    def expire(self, *, now_ms: int) -> LedgerOutput:
        """Placeholder rule: answer every call whose deadline has passed; approvals past theirs are denied."""
        out = LedgerOutput()
        self._now_ms = max(self._now_ms, now_ms)
        out.approval_jobs += self._approvals().expire(now_ms=now_ms)
        overdue = [
            tool_use_id
            for tool_use_id, pending in self.state.pending.items()
            if pending.deadline_ms is not None and pending.deadline_ms <= now_ms
        ]
        if overdue:
            self._answer_with_placeholders(out, overdue, None)
        return out

    def stuck_at_ms(self) -> int | None:
        """When the session's wait counts as stuck (None: it waits for nothing), for the worker's sweep index."""
        wait = session_wait(self.state)
        return None if wait is None else stuck_at_ms(wait, self._stuck_bound_ms)

    def next_deadline_ms(self) -> int | None:
        """The earliest pending deadline, for the worker's sweep timer."""
        deadlines = [p.deadline_ms for p in self.state.pending.values() if p.deadline_ms is not None]
        # Asked once per session and batch: no approval rules are built for a session with none pending.
        approval = self._approvals().next_deadline_ms() if self.state.approvals.pending else None
        return min([*deadlines, *([approval] if approval is not None else [])], default=None)

    # -- payload rules -----------------------------------------------------------------------

    def _prompt_message(self, prompt: UserPrompt) -> UserMessage:
        return create_user_message(
            prompt.content,
            uuid=prompt.uuid,
            timestamp=prompt.timestamp,
            is_meta=prompt.is_meta,
            origin=prompt.origin,
            clock=self._clock,
            ids=self._ids,
        )

    def _apply_recorded(self, out: LedgerOutput, message: Message, now_ms: int, traceparent: str | None) -> None:
        match message:
            case AssistantMessage():
                self._apply_assistant(out, message, False, now_ms, traceparent)
            case UserMessage() if tool_result_ids_of(message):
                self._apply_tool_result(out, message, traceparent)
            case ProgressMessage():
                self._apply_progress(out, message, traceparent)
            case TombstoneMessage():
                self._retract(out, [message.message], traceparent)
            case StoredMessageBase():
                self._log(out, message, traceparent)
            case _:
                out.dropped.append(Dropped("control_message", f"{message.type} is not part of a session log"))

    def _apply_replayed(self, out: LedgerOutput, message: Message, now_ms: int, traceparent: str | None) -> None:
        """A message of a replayed recording: logged as recorded, its entries marked ``replayed``, and the
        session left idle — the model is not due and the turn is closed — whatever the message is, so no
        request follows it and an interrupt or a queued prompt finds the session as after an ended turn."""
        self._replaying = True
        try:
            self._apply_recorded(out, message, now_ms, traceparent)
        finally:
            self._replaying = False
        self.state.awaiting_model = False
        self.state.turn_open = False

    def _apply_pi(self, out: LedgerOutput, payload: PiMessagePayload, now_ms: int, traceparent: str | None) -> None:
        """Issue 17: a pi message becomes the Claude Code message it maps to (P10), then follows that
        message's rule (an assistant may run its calls; a toolResult answers one)."""
        message = pi_message_to_claude_code(
            payload.message, session_id=self.state.session_id, uuid=payload.uuid, now=self._clock()
        )
        problem = malformed_block_problem(message) if isinstance(message, UserMessage | AssistantMessage) else None
        if problem is not None:
            out.invalid = f"pi_message {payload.uuid}: {problem}"
            return
        if isinstance(message, AssistantMessage):
            self._apply_assistant(out, message, payload.execute_tools, now_ms, traceparent)
        else:
            self._apply_recorded(out, message, now_ms, traceparent)

    def _apply_assistant(
        self,
        out: LedgerOutput,
        message: AssistantMessage,
        execute_tools: bool,
        now_ms: int,
        traceparent: str | None,
    ) -> None:
        if message.uuid in self.state.retracted_uuids:
            out.dropped.append(Dropped("retracted", f"assistant {message.uuid} was tombstoned"))
            return
        self._log(out, message, traceparent)
        self._register_calls(out, message, tool_uses_of(message), execute_tools, now_ms, traceparent)

    def _register_calls(
        self,
        out: LedgerOutput,
        message: AssistantMessage,
        calls: Sequence[ToolUseBlock],
        execute_tools: bool,
        now_ms: int,
        traceparent: str | None,
    ) -> None:
        fresh = [
            call
            for call in calls
            if call.id not in self.state.pending and call.id not in self.state.closed_tool_use_ids
        ]
        if not fresh:
            return
        deadline = now_ms + self._tool_deadline_ms if execute_tools else None
        for call in fresh:
            self.state.pending[call.id] = PendingToolUse(
                assistant_uuid=message.uuid, deadline_ms=deadline, dispatched=execute_tools, name=call.name
            )
        if execute_tools:
            out.tool_jobs.append(
                ToolJob(
                    session_id=self.state.session_id,
                    assistant_uuid=message.uuid,
                    message_id=message.api_message_id,
                    tool_uses=list(fresh),
                    dispatched_ms=now_ms,
                    deadline_ms=now_ms + self._tool_deadline_ms,
                    traceparent=traceparent,
                )
            )

    def _apply_stream_event(
        self, out: LedgerOutput, payload: StreamEvent, now_ms: int, traceparent: str | None
    ) -> None:
        reply = self.state.open_replies.get(payload.request_id)
        opened = reply is None
        if reply is None and self._interrupted(payload.request_seq):
            out.dropped.append(
                Dropped("interrupted", f"stream {payload.request_id} of request seq {payload.request_seq}")
            )
            out.state_changed = False
            return
        if reply is None:
            reply = OpenReply(
                request_id=payload.request_id,
                parent_before=self.state.chain_parent,
                execute_tools=payload.execute_tools,
                **({"max_output_tokens": payload.max_tokens} if payload.max_tokens is not None else {}),
            )
            self.state.open_replies[payload.request_id] = reply
        try:
            progress = reply.feed(
                payload.event, clock=self._clock, ids=self._ids, withhold_stop_error=payload.withhold_stop_error
            )
        except StreamAccumulationError as error:
            # A malformed or out-of-order event kills the attempt (R9.9): its partials are tombstoned and
            # the entry is reported as bad input.
            out.invalid = f"stream_event: {error}"
            self._apply_fallback(out, payload.request_id, traceparent)
            return
        if not (opened or progress.completed or progress.finished or progress.held_changed):
            out.state_changed = False  # only the reply's raw events grew
            return
        for message in progress.completed:
            self._log(out, message, traceparent)
        if progress.finished:
            del self.state.open_replies[payload.request_id]
            self.state.awaiting_model = False  # the reply is over, even one without a block
            assistant_messages = progress.all_messages
            calls = [call for message in assistant_messages for call in tool_uses_of(message)]
            if calls and assistant_messages:
                self._register_calls(out, assistant_messages[-1], calls, reply.execute_tools, now_ms, traceparent)

    def _apply_fallback(self, out: LedgerOutput, request_id: str, traceparent: str | None) -> None:
        reply = self.state.open_replies.pop(request_id, None)
        if reply is None:
            out.dropped.append(Dropped("unknown_stream", f"no open reply for request {request_id}"))
            return
        partials = reply.emitted_messages()
        self._retract(out, partials, traceparent)
        if partials:
            self.state.chain_parent = reply.parent_before
        self.state.awaiting_model = True  # the attempt is gone; the request waits for another (M5, crash recovery)

    def _apply_stuck_sweep(self, out: LedgerOutput, now_ms: int, traceparent: str | None) -> None:
        """End a wait whose owner was lost (bus/stuck_turns.py). Calls and approvals get what their owner
        would have given them at their deadline — the placeholder result, the approval's timeout denial — and
        running tools are stopped; the loop goes on from those results as after any deadline. A model reply
        that never came (or stopped coming) ends the turn as a timed-out call does in Claude Code (M2.9,
        M7.2 ``Request timed out``), keeping the blocks that were finished (M2.5) and answering their calls;
        a late reply to that request is dropped like one to an interrupted turn."""
        out.stuck_checked = True
        wait = stuck_wait(self.state, now_ms=now_ms, bound_ms=self._stuck_bound_ms)
        if wait is None:
            out.dropped.append(Dropped("not_stuck", f"session {self.state.session_id}"))
            return
        out.stuck_ended = wait.waiting_for
        self._now_ms = max(self._now_ms, now_ms)
        if wait.waiting_for != "model_reply":
            out.extend(self.expire(now_ms=now_ms))
            self._answer_with_placeholders(out, list(self.state.pending), traceparent)  # producer-owned calls
            out.interrupt_tools = True
            return
        streaming = list(self.state.open_replies.values())
        self.state.open_replies.clear()
        for reply in streaming:
            if reply.held is not None:
                self._log(out, reply.held, traceparent)
                reply.logged.append(reply.held)
                reply.held = None
            for message in reply.emitted_messages():
                calls = [call.id for call in tool_uses_of(message) if call.id not in self.state.closed_tool_use_ids]
                for call_id in calls:
                    self._log(
                        out, self._error_result(call_id, message.uuid, SYNTHETIC_TOOL_RESULT_PLACEHOLDER), traceparent
                    )
                    self.state.closed_tool_use_ids.add(call_id)
                    self.state.pending.pop(call_id, None)
                out.closed_tool_use_ids += calls
        error = create_assistant_api_error_message(REQUEST_TIMED_OUT, error="unknown", clock=self._clock, ids=self._ids)
        self._log(out, error, traceparent)
        self.state.interrupted_seq = self.state.seq
        self.state.awaiting_model = False
        out.interrupt_model = True

    def _interrupted(self, request_seq: int | None) -> bool:
        """A model reply to the request built at ``request_seq`` belongs to a turn an interrupt closed."""
        interrupted = self.state.interrupted_seq
        return request_seq is not None and interrupted is not None and request_seq <= interrupted

    def _apply_approval_answer(self, out: LedgerOutput, payload: ApprovalAnswer, traceparent: str | None) -> None:
        """H4.3/H4.4: a person's answer resolves its approval once; a deny with ``interrupt`` aborts the turn
        (H6.2). An answer that matches no parked approval of this session is refused with a typed reason."""
        outcome = self._approvals().answer(payload, now_ms=self._now_ms)
        if outcome.problem is not None:
            out.invalid_reason, out.invalid = outcome.problem
            return
        if outcome.continuation is None:
            out.dropped.append(Dropped("approval_resolved", outcome.ignored or payload.approval_id))
            return
        out.approval_jobs.append(outcome.continuation)
        if payload.behavior == "deny" and payload.interrupt:
            self._apply_interrupt(out, "user_cancel", traceparent)

    def _apply_interrupt(self, out: LedgerOutput, reason: InterruptReason, traceparent: str | None) -> None:
        out.interrupt_model = True
        out.interrupt_reason = reason
        try:
            self._close_turn_on_interrupt(out, reason, traceparent)
        finally:
            self.state.interrupted_seq = self.state.seq
            self.state.awaiting_model = False  # the interrupt closed the turn, whatever was under way

    def _close_turn_on_interrupt(self, out: LedgerOutput, reason: str, traceparent: str | None) -> None:
        out.approval_jobs += self._approvals().cancel_all(now_ms=self._now_ms)  # H6: pending approvals end
        streaming = list(self.state.open_replies.values())
        if streaming:
            # R10.1: abort during streaming — the blocks finished so far are kept (the held-back last one is
            # logged now, without a final usage: none came), every collected call is answered, then the text.
            self.state.open_replies.clear()
            for reply in streaming:
                if reply.held is not None:
                    self._log(out, reply.held, traceparent)
                    reply.logged.append(reply.held)
                    reply.held = None
                for message in reply.emitted_messages():
                    for call in tool_uses_of(message):
                        self._log(out, self._error_result(call.id, message.uuid, INTERRUPTED_BY_USER), traceparent)
                        out.closed_tool_use_ids.append(call.id)
                        self.state.closed_tool_use_ids.add(call.id)
            self._log_interruption(out, reason, traceparent, tool_use=False)
            return
        if any(p.dispatched for p in self.state.pending.values()):
            # R10.2: tools are running; the tool workers answer them, then the interrupt text follows.
            self.state.interrupt_reason = reason
            out.interrupt_tools = True
            return
        if self.state.awaiting_model:
            # R10.1 with nothing collected: the request is pending (the call not begun, or nothing streamed
            # yet). Idle (the turn over), Claude Code runs no query: nothing is written.
            self._log_interruption(out, reason, traceparent, tool_use=False)

    def _log_interruption(self, out: LedgerOutput, reason: str, traceparent: str | None, *, tool_use: bool) -> None:
        """R2.2c's interrupt notice (R10.1 / R10.2), unless the reason is ``interrupt``: a new user message
        follows and says it (H5.2)."""
        if reason != "interrupt":
            self._log(
                out, create_user_interruption_message(tool_use=tool_use, clock=self._clock, ids=self._ids), traceparent
            )

    def _apply_progress(self, out: LedgerOutput, message: ProgressMessage, traceparent: str | None) -> None:
        if message.parent_tool_use_id is not None and message.parent_tool_use_id in self.state.closed_tool_use_ids:
            out.dropped.append(Dropped("stale_progress", f"tool_use {message.parent_tool_use_id} already answered"))
            return
        self._log(out, message, traceparent)

    def _apply_tool_result(
        self, out: LedgerOutput, message: UserMessage, traceparent: str | None, *, live: bool = False
    ) -> None:
        answered = tool_result_ids_of(message)
        if live and (problem := self._live_result_problem(message, answered)) is not None:
            out.invalid = f"tool_result {message.uuid}: {problem}"
            return
        late = [i for i in answered if i in self.state.closed_tool_use_ids]
        if late:
            out.dropped.append(Dropped("duplicate_tool_result", f"tool_use {', '.join(late)} already answered"))
            return
        retracted = [
            i
            for i in answered
            if i in self.state.retracted_tool_use_ids
            or ((p := self.state.pending.get(i)) is not None and p.assistant_uuid in self.state.retracted_uuids)
        ]
        if retracted:
            out.dropped.append(Dropped("retracted", f"result for tombstoned call {', '.join(retracted)}"))
            return
        self._log(out, message, traceparent)
        self._close(out, answered, traceparent)

    def _live_result_problem(self, message: UserMessage, answered: Sequence[str]) -> str | None:
        """R8.1: a tool result answers calls this session made (pending, answered or retracted ones); a
        report that answers nothing, or a call never made, is bad input. Recorded results (replay) are
        exempt: a resumed history may hold results whose call was compacted away (R4.25 repairs them)."""
        if not answered:
            return "the message holds no tool_result block"
        if (problem := malformed_block_problem(message)) is not None:
            return problem
        state = self.state
        unknown = [
            i
            for i in answered
            if i not in state.pending and i not in state.closed_tool_use_ids and i not in state.retracted_tool_use_ids
        ]
        if unknown:
            return f"no tool_use {', '.join(unknown)} in this session"
        return None

    # -- helpers ------------------------------------------------------------------------------

    def _answer_with_placeholders(
        self, out: LedgerOutput, tool_use_ids: Sequence[str], traceparent: str | None
    ) -> None:
        for tool_use_id in tool_use_ids:
            pending = self.state.pending.get(tool_use_id)
            if pending is None:
                continue
            result = self._error_result(tool_use_id, pending.assistant_uuid, SYNTHETIC_TOOL_RESULT_PLACEHOLDER)
            self._log(out, result, traceparent)
            self._close(out, [tool_use_id], traceparent)

    def _error_result(self, tool_use_id: str, assistant_uuid: str, text: str) -> UserMessage:
        block = ToolResultBlock(tool_use_id=tool_use_id, content=text, is_error=True)
        return create_user_message(
            [block],
            tool_use_result=text,
            source_tool_assistant_uuid=assistant_uuid,
            clock=self._clock,
            ids=self._ids,
        )

    def _close(self, out: LedgerOutput, tool_use_ids: Sequence[str], traceparent: str | None) -> None:
        for tool_use_id in tool_use_ids:
            if (
                self.state.pending.pop(tool_use_id, None) is not None
                or tool_use_id not in self.state.closed_tool_use_ids
            ):
                self.state.closed_tool_use_ids.add(tool_use_id)
                out.closed_tool_use_ids.append(tool_use_id)
        if self.state.approvals.pending or self.state.approvals.parks:
            out.approval_jobs += self._approvals().closed(tool_use_ids, now_ms=self._now_ms)
        if not self.state.pending and self.state.interrupt_reason is None:
            self.state.awaiting_model = True  # every call of the round answered: the next request is due (R10.6)
        if self.state.interrupt_reason is not None and not any(p.dispatched for p in self.state.pending.values()):
            reason, self.state.interrupt_reason = self.state.interrupt_reason, None
            self._log_interruption(out, reason, traceparent, tool_use=True)

    def _retract(self, out: LedgerOutput, messages: Sequence[Message], traceparent: str | None) -> None:
        for message in messages:
            uuid = field_or_none(message, "uuid")
            if not isinstance(uuid, str) or uuid in self.state.retracted_uuids:
                continue
            self.state.retracted_uuids.add(uuid)
            out.retracted_uuids.append(uuid)
            if isinstance(message, AssistantMessage):
                for call in tool_uses_of(message):
                    self.state.pending.pop(call.id, None)
                    if call.id not in self.state.closed_tool_use_ids:
                        self.state.retracted_tool_use_ids.add(call.id)
            self._append(out, TombstoneMessage(message=message), traceparent)

    def _log(self, out: LedgerOutput, message: Message, traceparent: str | None) -> None:
        if isinstance(message, StoredMessageBase):
            cursor = ChainCursor(self.state.chain_parent)
            message = cursor.place(message)
            self.state.chain_parent = cursor.parent
        self._append(out, message, traceparent)
        self.state.turn_open = turn_open_after(message, was_open=self.state.turn_open)
        if not self.state.turn_open and self.state.queued_prompts:
            self._flush_queued(out, traceparent)

    def _flush_queued(self, out: LedgerOutput, traceparent: str | None) -> None:
        """Log the held queued prompts (the turn is over, or a prompt takes them along)."""
        held, self.state.queued_prompts = self.state.queued_prompts, []
        for prompt in held:
            self._log(out, self._prompt_message(prompt), traceparent)

    def _append(self, out: LedgerOutput, message: Message, traceparent: str | None) -> None:
        self.state.seq += 1
        self.state.awaiting_model = model_due_after(message, due=self.state.awaiting_model)
        self.state.last_turn_failed = turn_failed_after(message, failed=self.state.last_turn_failed)
        fields: dict[str, object] = {
            "session_id": self.state.session_id,
            "seq": self.state.seq,
            "message": message,
            "traceparent": traceparent,
        }
        if self._ingress_id is not None:
            fields["ingress_id"] = self._ingress_id
        if self._replaying:
            fields["replayed"] = True
        out.entries.append(LogEntry.from_fields(fields))


def _progress(payload: IngressPayload, out: LedgerOutput) -> bool:
    """Whether applying ``payload`` moved the session on (what a stuck wait is measured from): a message
    logged, work handed out, a reply streaming, a call parked for a person."""
    if out.entries or out.tool_jobs or out.approval_jobs:
        return True
    accepted = out.invalid is None and not out.dropped
    return accepted and isinstance(payload, StreamEvent | ApprovalRequested)


def new_ledger_state(session_id: str) -> LedgerState:
    """The state of a session ingestion has never seen."""
    return LedgerState(session_id=session_id)


__all__ = [
    "Dropped",
    "LedgerOutput",
    "LedgerState",
    "PendingToolUse",
    "SessionLedger",
    "new_ledger_state",
    "tool_result_ids_of",
    "tool_uses_of",
]
