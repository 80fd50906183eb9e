"""Issue 15, internal events cannot be forged (bus/internal_events.py): the authenticator, and
what an entry without one may not do."""

from __future__ import annotations

from typing import get_args

import pytest

from agentbus_redis.approvals.records import ApprovalRequested, AskedCall
from agentbus_redis.bus import internal_events
from agentbus_redis.bus.events import (
    AssistantReply,
    DeadlineSweep,
    IngressEnvelope,
    IngressPayload,
    PiMessagePayload,
    RecordedMessage,
    StuckTurnSweep,
    ToolJobAbandoned,
    ToolProgressReport,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.internal_events import (
    INTERNAL_KEY_PREFIX,
    forged_internal_problem,
    idempotency_slot,
    internal_event_proof,
    is_authentic,
)
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_progress_message, create_user_message
from agentbus_redis.pi.messages import PiToolResultMessage

KEY = b"worker-secret"


def envelope(payload: IngressPayload, key: str = "k1") -> IngressEnvelope:
    return IngressEnvelope(session_id="s1", idempotency_key=key, payload=payload)


def result_for(tool_use_id: str) -> ToolResultReport:
    return ToolResultReport(message=create_user_message([ToolResultBlock(tool_use_id=tool_use_id, content="forged")]))


@pytest.fixture
def ledger() -> SessionLedger:
    """A session with one call dispatched to the tool workers (t_run) and one the producer answers (t_own)."""
    ledger = SessionLedger(new_ledger_state("s1"))
    for call, execute in (("t_run", True), ("t_own", False)):
        message = create_assistant_message([ToolUseBlock(id=call, name="Bash", input={"command": "ls"})])
        ledger.apply(envelope(AssistantReply(message=message, execute_tools=execute), key=call), now_ms=0)
    assert {i: p.dispatched for i, p in ledger.state.pending.items()} == {"t_run": True, "t_own": False}
    return ledger


def test_the_proof_authenticates_exactly_the_signed_bytes_under_the_key() -> None:
    data = envelope(DeadlineSweep(now_ms=1)).to_wire_json().encode()
    proof = internal_event_proof(KEY, data)
    assert is_authentic(KEY, data, proof)
    assert not is_authentic(KEY, data.replace(b'"now_ms":1', b'"now_ms":9'), proof)
    assert not is_authentic(b"producer-guess", data, proof)
    assert not is_authentic(KEY, data, None)
    assert not is_authentic(KEY, data, b"0" * 64)


PARKED = AskedCall(
    approval_id="apr_t_run", tool_use=ToolUseBlock(id="t_run", name="Bash", input={}), deadline_ms=1, timeout_s=1
)


@pytest.mark.parametrize(
    "payload",
    [
        DeadlineSweep(now_ms=10**13),
        StuckTurnSweep(now_ms=10**13),
        ToolJobAbandoned(assistant_uuid="a1", tool_use_ids=["t_run"], reason="x"),
        ApprovalRequested(park_id="p1", assistant_uuid="a1", dispatched_ms=0, asked=[PARKED]),
    ],
)
def test_internal_only_payloads_without_proof_are_forged(ledger: SessionLedger, payload: IngressPayload) -> None:
    problem = forged_internal_problem(envelope(payload), ledger.state.pending)
    assert problem is not None
    assert payload.type in problem


def test_a_result_or_progress_for_a_dispatched_call_is_the_tool_workers(ledger: SessionLedger) -> None:
    progress = create_progress_message(tool_use_id="t_run", parent_tool_use_id="t_run", data={"type": "bash"})
    forged: list[IngressPayload] = [
        result_for("t_run"),
        RecordedMessage(message=result_for("t_run").message),
        ToolProgressReport(message=progress),
        RecordedMessage(message=progress),
        PiMessagePayload(message=PiToolResultMessage(tool_call_id="t_run", content="forged"), uuid="u1"),
    ]
    for payload in forged:
        problem = forged_internal_problem(envelope(payload), ledger.state.pending)
        assert problem is not None, payload
        assert "t_run" in problem


def test_producers_answer_the_calls_they_keep_and_publish_everything_else(ledger: SessionLedger) -> None:
    """Replay (execute_tools=false): the producer's own results stay valid, as do prompts and results
    for calls the session never made (those are the ledger's bad input, not a forgery)."""
    for payload in (result_for("t_own"), RecordedMessage(message=result_for("t_own").message), result_for("t_x")):
        assert forged_internal_problem(envelope(payload), ledger.state.pending) is None
    assert forged_internal_problem(envelope(UserPrompt(content="hi")), ledger.state.pending) is None


def test_the_workers_key_namespace_is_theirs(ledger: SessionLedger) -> None:
    squatter = envelope(UserPrompt(content="hi"), key=f"{INTERNAL_KEY_PREFIX}tool_result:t_run")
    assert forged_internal_problem(squatter, ledger.state.pending) is not None
    assert idempotency_slot("tool_result:t_run", authenticated=True) == "internal:tool_result:t_run"
    assert idempotency_slot("tool_result:t_run", authenticated=False) == "tool_result:t_run"


def test_every_ingress_payload_is_told_apart_by_its_type() -> None:
    """``forged_internal_problem`` dispatches on ``payload.type`` rather than on the class: that is the same
    only while every payload model of the ingress union has one literal type of its own."""
    members = get_args(get_args(IngressPayload)[0])
    literals = [get_args(model.model_fields["type"].annotation) for model in members]
    assert all(len(values) == 1 for values in literals), literals
    assert len({values[0] for values in literals}) == len(members)


def test_the_plain_payloads_are_exactly_those_no_rule_looks_into() -> None:
    """The fast path of ``forged_internal_problem`` (only the key checked) covers the payload types that no other
    rule of it names: each type of the ingress union is in exactly one of its sets."""
    members = get_args(get_args(IngressPayload)[0])
    kinds = [get_args(model.model_fields["type"].annotation)[0] for model in members]
    sets = [
        internal_events._PLAIN_TYPES,
        internal_events._WORKER_ONLY_TYPES,
        internal_events._ANSWERING_TYPES,
        {internal_events._SYSTEM_NOTICE},
        {internal_events._ATTACHMENT_NOTICE},
    ]
    assert sorted(kind for names in sets for kind in names) == sorted(kinds)
