"""Human approval rules (agent-loop.md §H), pure: the texts (H5, H6.3), suggestions (H4.2, H7.3), the
session's rule updates (H7.1) and ingestion's approval book (approvals/ledger.py) — parks, answers,
deadlines, interrupts, R8.5 tails, exactly one resolution."""

from __future__ import annotations

import pytest

from agentbus_redis.approvals.ledger import APPROVAL_MISMATCH, UNKNOWN_APPROVAL
from agentbus_redis.approvals.records import (
    ApprovalAnswer,
    ApprovalRequested,
    AskedCall,
    SessionPermissions,
    apply_permission_updates,
    approval_timeout_text,
    permission_suggestions,
    rejection_text,
    rule_text,
    with_session_permissions,
)
from agentbus_redis.bus.events import (
    AssistantReply,
    DeadlineSweep,
    IngressEnvelope,
    IngressPayload,
    Interrupt,
    ToolResultReport,
)
from agentbus_redis.bus.internal_events import forged_internal_problem
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    REJECT_MESSAGE_WITH_REASON_PREFIX,
    SUBAGENT_REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX,
)
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.permissions.decide import PermissionContext, check_permission, decide

BASH: JsonObject = {"command": "make deploy"}


# --- texts ------------------------------------------------------------------------------------------


def test_h6_3_rejection_texts_main_thread_and_subagent() -> None:
    assert rejection_text() == REJECT_MESSAGE
    assert rejection_text("  ") == REJECT_MESSAGE
    assert rejection_text("use staging") == REJECT_MESSAGE_WITH_REASON_PREFIX + "use staging"
    assert rejection_text(None, is_subagent=True) == SUBAGENT_REJECT_MESSAGE
    assert rejection_text("no", is_subagent=True) == SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX + "no"


def test_h4_4_timeout_text_is_the_failed_prompt_channel_form() -> None:
    assert approval_timeout_text(3600) == "Tool permission request failed: Error: no answer within 3600s"
    assert approval_timeout_text(1.5).startswith("Tool permission request failed: Error: ")


# --- suggestions and session rules ----------------------------------------------------------------


def context(**fields: object) -> PermissionContext:
    return PermissionContext.from_settings(workspace_root="/ws", ask_policy="approve", **fields)  # type: ignore[arg-type]


def test_h2_approve_policy_leaves_the_ask_for_a_person_but_dont_ask_still_denies() -> None:
    assert decide("Bash", BASH, context()).behavior == "ask"
    assert decide("Bash", BASH, context(mode="dontAsk")).behavior == "deny"  # H2.3


def test_h7_3_suggestions_per_tool() -> None:
    asked = check_permission("Bash", BASH, context())
    assert permission_suggestions("Bash", BASH, asked, blocked_path=None) == [
        {
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": "make deploy"}],
            "behavior": "allow",
            "destination": "localSettings",
        }
    ]
    edit: JsonObject = {"file_path": "/ws/a.py", "old_string": "a", "new_string": "b"}
    asked_edit = check_permission("Edit", edit, context(allow=[]))
    assert permission_suggestions("Edit", edit, asked_edit, blocked_path=None) == [
        {"type": "setMode", "mode": "acceptEdits", "destination": "session"}
    ]
    outside: JsonObject = {"file_path": "/etc/hosts"}
    asked_read = check_permission("Read", outside, context())
    (rule,) = permission_suggestions("Read", outside, asked_read, blocked_path="/etc/hosts")
    assert rule["rules"] == [{"toolName": "Read", "ruleContent": "//etc/hosts"}]
    by_rule = check_permission("Bash", BASH, context(ask=["Bash(make:*)"]))
    assert permission_suggestions("Bash", BASH, by_rule, blocked_path=None) == []  # an allow rule would not help


def test_h7_3_the_bash_suggestion_allows_the_identical_call_in_the_session() -> None:
    asked = check_permission("Bash", BASH, context())
    session = apply_permission_updates(
        SessionPermissions(), permission_suggestions("Bash", BASH, asked, blocked_path=None)
    )
    assert decide("Bash", BASH, with_session_permissions(context(), session)).behavior == "allow"
    assert decide("Bash", {"command": "make clean"}, with_session_permissions(context(), session)).behavior == "ask"


def test_h7_1_updates_add_replace_remove_and_set_mode() -> None:
    add: JsonObject = {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls:*"}], "behavior": "allow"}
    state = apply_permission_updates(SessionPermissions(), [add, add])
    assert state.allow == ["Bash(ls:*)"]  # de-duplicated
    deny: JsonObject = {"type": "addRules", "rules": [{"toolName": "WebFetch"}], "behavior": "deny"}
    state = apply_permission_updates(
        state, [deny, {"type": "setMode", "mode": "acceptEdits", "destination": "session"}]
    )
    assert (state.deny, state.mode) == (["WebFetch"], "acceptEdits")
    replace: JsonObject = {"type": "replaceRules", "rules": [{"toolName": "Read"}], "behavior": "allow"}
    state = apply_permission_updates(state, [replace])
    assert state.allow == ["Read"]
    remove: JsonObject = {"type": "removeRules", "rules": [{"toolName": "Read"}], "behavior": "allow"}
    assert apply_permission_updates(state, [remove]).allow == []


def test_h4_3_malformed_updates_are_ignored() -> None:
    updates: list[object] = [
        "nope",
        {"type": "addRules", "rules": "x", "behavior": "allow"},
        {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "a:*:b"}], "behavior": "allow"},
        {"type": "addRules", "rules": [{"toolName": "Bash"}], "behavior": "sometimes"},
        {"type": "setMode", "mode": "yolo"},
        {"type": "addDirectories", "directories": ["/tmp"], "destination": "session"},
    ]
    assert apply_permission_updates(SessionPermissions(), updates) == SessionPermissions()  # type: ignore[arg-type]


def test_h1_3_rule_text_escapes_parentheses() -> None:
    assert rule_text("Bash", "echo (hi)") == "Bash(echo \\(hi\\))"
    assert rule_text("Read") == "Read"


# --- the ledger's approval book ---------------------------------------------------------------------


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(100))


def send(ledger: SessionLedger, payload: IngressPayload, now_ms: int = 0) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload), now_ms=now_ms)


def call(tool_use_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="Bash", input={"command": f"run {tool_use_id}"})


def park(ledger: SessionLedger, asked: list[str], tail: list[str], *, deadline_ms: int = 5000) -> None:
    """A reply with the calls, then a tool worker's park of ``asked`` (+ ``tail``)."""
    message = create_assistant_message([call(i) for i in [*asked, *tail]]).model_copy(update={"uuid": "a1"})
    send(ledger, AssistantReply(message=message), now_ms=0)
    payload = ApprovalRequested(
        park_id="p1",
        assistant_uuid="a1",
        dispatched_ms=0,
        asked=[
            AskedCall(approval_id=f"apr_{i}", tool_use=call(i), deadline_ms=deadline_ms, timeout_s=deadline_ms / 1000)
            for i in asked
        ],
        tail=[call(i) for i in tail],
    )
    send(ledger, payload, now_ms=10)


def result(ledger: SessionLedger, tool_use_id: str, now_ms: int) -> LedgerOutput:
    message = create_user_message(
        [ToolResultBlock(tool_use_id=tool_use_id, content="ok")], source_tool_assistant_uuid="a1"
    )
    return send(ledger, ToolResultReport(message=message), now_ms=now_ms)


def test_h_parking_moves_placeholder_deadlines_past_the_approval(ledger: SessionLedger) -> None:
    park(ledger, ["t1"], ["t2"])
    assert ledger.next_deadline_ms() == 5000  # the approval's own deadline comes first
    assert ledger.state.pending["t1"].deadline_ms == 6000
    assert ledger.state.pending["t2"].deadline_ms == 6000
    assert send(ledger, DeadlineSweep(now_ms=1500)).entries == []  # no placeholder at the job's deadline


def test_h4_4_an_answer_resolves_once_and_the_tail_follows_the_result(ledger: SessionLedger) -> None:
    park(ledger, ["t1"], ["t2"])
    out = send(ledger, ApprovalAnswer(approval_id="apr_t1", tool_use_id="t1", behavior="allow"), now_ms=100)
    (job,) = out.approval_jobs
    assert (job.approval_id, [c.id for c in job.tool_uses], job.dispatched_ms) == ("apr_t1", ["t1"], 0)
    assert job.decision is not None
    assert job.decision.outcome == "allowed"
    again = send(ledger, ApprovalAnswer(approval_id="apr_t1", tool_use_id="t1", behavior="deny"), now_ms=200)
    assert (again.approval_jobs, again.invalid, [d.reason for d in again.dropped]) == ([], None, ["approval_resolved"])
    assert ledger.next_deadline_ms() == 1100  # resolved: only the answer's own tool deadline is left
    (tail,) = result(ledger, "t1", now_ms=300).approval_jobs  # R8.5: the later batch only now
    assert (tail.approval_id, [c.id for c in tail.tool_uses]) == (None, ["t2"])


def test_h4_3_deny_carries_the_message_and_defaults_to_reject(ledger: SessionLedger) -> None:
    park(ledger, ["t1", "t2"], [])
    (denied,) = send(ledger, ApprovalAnswer(approval_id="apr_t1", tool_use_id="t1", behavior="deny")).approval_jobs
    assert denied.decision is not None
    assert denied.decision.message == REJECT_MESSAGE
    text = REJECT_MESSAGE_WITH_REASON_PREFIX + "no"
    (second,) = send(
        ledger, ApprovalAnswer(approval_id="apr_t2", tool_use_id="t2", behavior="deny", message=text)
    ).approval_jobs
    assert second.decision is not None
    assert second.decision.message == text


def test_h_answers_that_match_no_parked_approval_are_typed_bad_input(ledger: SessionLedger) -> None:
    park(ledger, ["t1"], [])
    wrong = send(ledger, ApprovalAnswer(approval_id="apr_t1", tool_use_id="t9", behavior="allow"))
    assert (wrong.invalid_reason, wrong.approval_jobs) == (APPROVAL_MISMATCH, [])
    unknown = send(ledger, ApprovalAnswer(approval_id="apr_x", tool_use_id="t1", behavior="allow"))
    assert (unknown.invalid_reason, unknown.approval_jobs) == (UNKNOWN_APPROVAL, [])
    assert "apr_t1" in ledger.state.approvals.pending


def test_h_a_deadline_denies_with_the_timeout_text(ledger: SessionLedger) -> None:
    park(ledger, ["t1"], [], deadline_ms=2000)
    (job,) = send(ledger, DeadlineSweep(now_ms=2000)).approval_jobs
    assert job.decision is not None
    assert (job.decision.outcome, job.decision.message) == ("timed_out", approval_timeout_text(2))
    assert ledger.state.pending["t1"].deadline_ms == 3000  # a fresh tool deadline for the answer


def test_h6_an_interrupt_cancels_every_pending_approval(ledger: SessionLedger) -> None:
    park(ledger, ["t1", "t2"], ["t3"])
    out = send(ledger, Interrupt(), now_ms=50)
    assert sorted(job.approval_id or "" for job in out.approval_jobs) == ["apr_t1", "apr_t2"]
    assert all(j.decision is not None and j.decision.message == REJECT_MESSAGE for j in out.approval_jobs)
    assert out.interrupt_tools  # R10.2: the interrupt text follows once every call has its result
    assert ledger.state.approvals.pending == {}


def test_h6_2_deny_with_interrupt_aborts_the_turn(ledger: SessionLedger) -> None:
    park(ledger, ["t1", "t2"], [])
    out = send(ledger, ApprovalAnswer(approval_id="apr_t1", tool_use_id="t1", behavior="deny", interrupt=True))
    outcomes = {job.approval_id: job.decision.outcome for job in out.approval_jobs if job.decision is not None}
    assert outcomes == {"apr_t1": "denied", "apr_t2": "cancelled"}
    assert out.interrupt_tools


def test_h_only_tool_workers_may_park_calls() -> None:
    payload = ApprovalRequested(
        park_id="p",
        assistant_uuid="a",
        dispatched_ms=0,
        asked=[AskedCall(approval_id="x", tool_use=call("t"), deadline_ms=0, timeout_s=1)],
    )
    envelope = IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload)
    assert forged_internal_problem(envelope, {}) is not None
    answer = IngressEnvelope(
        session_id="s1", idempotency_key="k", payload=ApprovalAnswer(approval_id="x", tool_use_id="t", behavior="allow")
    )
    assert forged_internal_problem(answer, {}) is None  # a person's answer is a producer's entry
