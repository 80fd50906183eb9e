"""Ingestion's approval rules (pure): parks, answers, deadlines, interrupts (agent-loop.md §H, see
:mod:`agentbus_redis.approvals.records` for the flow).

The session ledger keeps an :class:`ApprovalBook` beside its pending calls and calls these functions; each
returns the :class:`~agentbus_redis.approvals.records.ApprovalContinuation` jobs to hand to the tool workers. Because
the
ledger of a session is applied by one shard owner in atomic batches, an approval is resolved exactly once
whatever arrives first — a person's answer (H4.3), its deadline (a deadline sweep), an interrupt (H6) —
and a later answer is ignored (H4.4: "Responses for an already resolved tool_use_id are ignored").

Placeholder deadlines: a parked call would otherwise get the placeholder once the job's deadline passes.
Parking moves the deadline of every parked call to the approval's deadline plus the tool deadline, and a
resolved call gets a fresh tool deadline, so the placeholder still answers a call whose worker vanished.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from pydantic import Field

from agentbus_redis.approvals.records import (
    ApprovalAnswer,
    ApprovalContinuation,
    ApprovalDecision,
    ApprovalRequested,
    approval_timeout_text,
    rejection_text,
)
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.wire import WireHolder

UNKNOWN_APPROVAL = "unknown_approval"
"""Dead-letter reason: an answer for an approval this session never parked."""
APPROVAL_MISMATCH = "approval_mismatch"
"""Dead-letter reason: an answer whose tool_use_id is not the parked approval's."""


class PendingApproval(WireHolder):
    """An asked call waiting for a person."""

    park_id: str
    tool_use: ToolUseBlock
    deadline_ms: int
    timeout_s: float
    agent_id: str | None = None


class Park(WireHolder):
    """Calls of one job parked together: ``waiting`` (asked calls without a result yet) and the ``tail``
    that runs once they all have one (R8.5: a later batch never starts before an earlier one ends)."""

    assistant_uuid: str
    message_id: str | None = None
    dispatched_ms: int
    traceparent: str | None = None
    waiting: list[str] = Field(default_factory=list)
    tail: list[ToolUseBlock] = Field(default_factory=list)
    agent_id: str | None = None


class ApprovalBook(WireHolder):
    """A session's approvals, kept in its ledger state."""

    pending: dict[str, PendingApproval] = Field(default_factory=dict)
    parks: dict[str, Park] = Field(default_factory=dict)
    resolved: dict[str, str] = Field(default_factory=dict)
    """approval id → tool_use_id of every approval already resolved (late answers are ignored)."""


class HasDeadline(Protocol):
    """What the book needs of a ledger's pending call (:class:`agentbus_redis.bus.ledger.PendingToolUse`)."""

    deadline_ms: int | None


@dataclass(frozen=True, slots=True)
class AnswerOutcome:
    """An answer applied: the continuation; or ignored (``ignored``); or refused (``problem``, typed)."""

    continuation: ApprovalContinuation | None = None
    ignored: str | None = None
    problem: tuple[str, str] | None = None


class ApprovalRules:
    """The approval rules over one session's book and pending calls."""

    def __init__(
        self,
        session_id: str,
        book: ApprovalBook,
        pending_calls: Mapping[str, HasDeadline],
        *,
        tool_deadline_ms: int,
    ) -> None:
        self.session_id = session_id
        self.book = book
        self.pending_calls = pending_calls
        self.tool_deadline_ms = tool_deadline_ms

    def _set_deadline(self, tool_use_id: str, deadline_ms: int) -> None:
        call = self.pending_calls.get(tool_use_id)
        if call is not None and call.deadline_ms is not None:
            call.deadline_ms = deadline_ms

    def park(self, payload: ApprovalRequested, *, traceparent: str | None) -> None:
        """Record a park; its calls' placeholder deadlines move past the approvals' deadlines. Calls already
        answered (or not of this session) are left out; a park seen before is ignored."""
        if payload.park_id in self.book.parks:
            return
        asked = [
            call
            for call in payload.asked
            if call.tool_use.id in self.pending_calls
            and call.approval_id not in self.book.pending
            and call.approval_id not in self.book.resolved
        ]
        if not asked:
            return
        latest = max(call.deadline_ms for call in asked) + self.tool_deadline_ms
        for call in asked:
            self.book.pending[call.approval_id] = PendingApproval(
                park_id=payload.park_id,
                tool_use=call.tool_use,
                deadline_ms=call.deadline_ms,
                timeout_s=call.timeout_s,
                agent_id=call.agent_id,
            )
            self._set_deadline(call.tool_use.id, call.deadline_ms + self.tool_deadline_ms)
        tail = [block for block in payload.tail if block.id in self.pending_calls]
        for block in tail:
            self._set_deadline(block.id, latest)
        self.book.parks[payload.park_id] = Park(
            assistant_uuid=payload.assistant_uuid,
            message_id=payload.message_id,
            dispatched_ms=payload.dispatched_ms,
            traceparent=traceparent,
            waiting=[call.tool_use.id for call in asked],
            tail=tail,
            agent_id=asked[0].agent_id,
        )

    def answer(self, payload: ApprovalAnswer, *, now_ms: int) -> AnswerOutcome:
        """A person's answer, checked against the parked approval (id, this session, tool_use_id)."""
        resolved = self.book.resolved.get(payload.approval_id)
        if resolved is not None and resolved == payload.tool_use_id:
            return AnswerOutcome(ignored=f"approval {payload.approval_id} was already resolved")
        pending = self.book.pending.get(payload.approval_id)
        if pending is None and resolved is None:
            text = f"session {self.session_id} has no approval {payload.approval_id}"
            return AnswerOutcome(problem=(UNKNOWN_APPROVAL, text))
        expected = pending.tool_use.id if pending is not None else resolved
        if expected != payload.tool_use_id:
            text = f"approval {payload.approval_id} is for tool_use {expected}, not {payload.tool_use_id}"
            return AnswerOutcome(problem=(APPROVAL_MISMATCH, text))
        assert pending is not None
        if payload.behavior == "allow":
            decision = ApprovalDecision(
                outcome="allowed",
                updated_input=payload.updated_input,
                updated_permissions=payload.updated_permissions,
                message=payload.message,
                decided_ms=now_ms,
                answered_by=payload.answered_by,
            )
        else:
            message = payload.message
            if message is None:
                message = rejection_text(None, is_subagent=pending.agent_id is not None)
            decision = ApprovalDecision(
                outcome="denied",
                message=message,
                interrupt=payload.interrupt,
                decided_ms=now_ms,
                answered_by=payload.answered_by,
            )
        return AnswerOutcome(continuation=self._resolve(payload.approval_id, decision, now_ms))

    def expire(self, *, now_ms: int) -> list[ApprovalContinuation]:
        """Approvals past their deadline are denied with the timeout text."""
        overdue = [(i, p) for i, p in self.book.pending.items() if p.deadline_ms <= now_ms]
        return [
            self._resolve(
                approval_id,
                ApprovalDecision(outcome="timed_out", message=approval_timeout_text(p.timeout_s), decided_ms=now_ms),
                now_ms,
            )
            for approval_id, p in overdue
        ]

    def cancel_all(self, *, now_ms: int) -> list[ApprovalContinuation]:
        """An interrupt (H6.1: Esc at the dialog = abort): every pending approval is rejected with
        REJECT_MESSAGE (SUBAGENT_REJECT_MESSAGE for a sub-agent's call), H5.1's permission-denied shape."""
        return [
            self._resolve(
                approval_id,
                ApprovalDecision(
                    outcome="cancelled",
                    message=rejection_text(None, is_subagent=p.agent_id is not None),
                    interrupt=True,
                    decided_ms=now_ms,
                ),
                now_ms,
            )
            for approval_id, p in list(self.book.pending.items())
        ]

    def next_deadline_ms(self) -> int | None:
        return min((p.deadline_ms for p in self.book.pending.values()), default=None)

    def closed(self, tool_use_ids: Iterable[str], *, now_ms: int) -> list[ApprovalContinuation]:
        """Calls got their results: a park whose asked calls all have one releases its tail. (A call that was
        answered while its approval still waited — a placeholder — cancels that approval.)"""
        jobs: list[ApprovalContinuation] = []
        closed = set(tool_use_ids)
        for approval_id, pending in list(self.book.pending.items()):
            if pending.tool_use.id in closed:
                decision = ApprovalDecision(outcome="cancelled", message=None, decided_ms=now_ms)
                jobs.append(self._resolve(approval_id, decision, now_ms))
        for park_id, park in list(self.book.parks.items()):
            if not closed.intersection(park.waiting):
                continue
            park.waiting = [i for i in park.waiting if i not in closed]
            if park.waiting:
                continue
            del self.book.parks[park_id]
            tail = [call for call in park.tail if call.id in self.pending_calls]
            if tail:
                for call in tail:
                    self._set_deadline(call.id, now_ms + self.tool_deadline_ms)
                jobs.append(self._continuation(park_id, park, tail, now_ms))
        return jobs

    def _resolve(self, approval_id: str, decision: ApprovalDecision, now_ms: int) -> ApprovalContinuation:
        pending = self.book.pending.pop(approval_id)
        self.book.resolved[approval_id] = pending.tool_use.id
        self._set_deadline(pending.tool_use.id, now_ms + self.tool_deadline_ms)
        park = self.book.parks[pending.park_id]
        return self._continuation(
            pending.park_id,
            park,
            [pending.tool_use],
            now_ms,
            approval_id=approval_id,
            decision=decision,
            agent_id=pending.agent_id,
        )

    def _continuation(
        self,
        park_id: str,
        park: Park,
        calls: list[ToolUseBlock],
        now_ms: int,
        *,
        approval_id: str | None = None,
        decision: ApprovalDecision | None = None,
        agent_id: str | None = None,
    ) -> ApprovalContinuation:
        return ApprovalContinuation(
            session_id=self.session_id,
            park_id=park_id,
            assistant_uuid=park.assistant_uuid,
            message_id=park.message_id,
            tool_uses=calls,
            dispatched_ms=park.dispatched_ms,
            deadline_ms=now_ms + self.tool_deadline_ms,
            traceparent=park.traceparent,
            approval_id=approval_id,
            agent_id=agent_id if approval_id is not None else park.agent_id,
            decision=decision,
        )
