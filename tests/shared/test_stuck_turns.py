"""No wait without an owner (issue 25): when a session's wait is stuck (bus/stuck_turns.py) and how the
ledger ends it (a ``StuckTurnSweep`` applied in order) — pure, no Redis."""

from __future__ import annotations

import pytest

from agentbus_redis.approvals.records import ApprovalRequested, AskedCall
from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    IngressPayload,
    StreamEvent,
    StuckTurnSweep,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.internal_events import forged_internal_problem
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.bus.stuck_turns import SessionWait, session_wait, stuck_at_ms, stuck_wait
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.model.error_texts import REQUEST_TIMED_OUT

BOUND_MS = 10_000
TOOL_DEADLINE_MS = 60_000


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(
        new_ledger_state("s1"),
        tool_deadline_ms=TOOL_DEADLINE_MS,
        stuck_bound_ms=BOUND_MS,
        clock=FixedClock(),
        ids=SequentialIds(100),
    )


def send(ledger: SessionLedger, payload: IngressPayload, now_ms: int) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload), now_ms=now_ms)


def reply_with_calls(*calls: tuple[str, str], uuid: str = "a1") -> AssistantMessage:
    blocks = [ToolUseBlock(id=i, name=name, input={}) for i, name in calls]
    return create_assistant_message(blocks).model_copy(update={"uuid": uuid})


def test_an_idle_session_waits_for_nothing(ledger: SessionLedger) -> None:
    assert session_wait(ledger.state) is None
    send(ledger, UserPrompt(content="hi", uuid="u1"), now_ms=1000)
    send(ledger, AssistantReply(message=create_assistant_message("done", stop_reason="end_turn")), now_ms=2000)
    assert session_wait(ledger.state) is None
    assert ledger.stuck_at_ms() is None


def test_a_prompt_waits_for_the_model_and_is_stuck_a_bound_after_its_last_progress(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="hi", uuid="u1"), now_ms=1000)
    assert session_wait(ledger.state) == SessionWait("model_reply", 1000, None)
    assert ledger.stuck_at_ms() == 1000 + BOUND_MS
    assert stuck_wait(ledger.state, now_ms=1000 + BOUND_MS - 1, bound_ms=BOUND_MS) is None
    assert stuck_wait(ledger.state, now_ms=1000 + BOUND_MS, bound_ms=BOUND_MS) is not None


def test_a_streaming_reply_is_progress(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="hi", uuid="u1"), now_ms=1000)
    start = {
        "type": "message_start",
        "message": {"id": "m1", "type": "message", "role": "assistant", "model": "c", "content": [], "usage": {}},
    }
    send(ledger, StreamEvent(request_id="r1", event=start), now_ms=5000)
    assert ledger.stuck_at_ms() == 5000 + BOUND_MS


def test_calls_wait_until_their_deadline_then_a_bound_more(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Read"))), now_ms=1000)
    wait = session_wait(ledger.state)
    assert wait == SessionWait("tool_result", 1000, 1000 + TOOL_DEADLINE_MS)
    assert stuck_at_ms(wait, BOUND_MS) == 1000 + TOOL_DEADLINE_MS + BOUND_MS


def test_an_agent_call_waits_for_a_child(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Read"), ("t2", "Agent"))), now_ms=1000)
    wait = session_wait(ledger.state)
    assert wait is not None
    assert wait.waiting_for == "child_agent"


def test_a_producer_supplied_call_has_no_owner_deadline(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Read")), execute_tools=False), now_ms=1000)
    assert session_wait(ledger.state) == SessionWait("tool_result", 1000, None)


def park(ledger: SessionLedger, *, deadline_ms: int) -> None:
    call = ToolUseBlock(id="t1", name="Bash", input={"command": "make deploy"})
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Bash"))), now_ms=0)
    asked = AskedCall(approval_id="apr_t1", tool_use=call, deadline_ms=deadline_ms, timeout_s=deadline_ms / 1000)
    payload = ApprovalRequested(park_id="p1", assistant_uuid="a1", dispatched_ms=0, asked=[asked], tail=[])
    send(ledger, payload, now_ms=10)


def test_an_approval_within_its_time_is_never_stuck(ledger: SessionLedger) -> None:
    park(ledger, deadline_ms=100_000)
    wait = session_wait(ledger.state)
    assert wait is not None
    assert wait.waiting_for == "approval"
    out = send(ledger, StuckTurnSweep(now_ms=50_000), now_ms=50_000)  # far past the bound of no progress
    assert (out.stuck_ended, out.entries, out.approval_jobs) == (None, [], [])
    assert out.stuck_checked
    assert "apr_t1" in ledger.state.approvals.pending


def test_an_approval_whose_timeout_never_came_is_denied_with_its_timeout_text(ledger: SessionLedger) -> None:
    park(ledger, deadline_ms=20_000)
    out = send(ledger, StuckTurnSweep(now_ms=20_000 + BOUND_MS), now_ms=20_000 + BOUND_MS)
    assert out.stuck_ended == "approval"
    (job,) = out.approval_jobs
    assert job.decision is not None
    assert job.decision.outcome == "timed_out"


def test_a_lost_model_reply_ends_the_turn_with_claude_codes_timeout_text(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="hi", uuid="u1"), now_ms=1000)
    assert send(ledger, StuckTurnSweep(now_ms=1000 + BOUND_MS - 1), now_ms=1).stuck_ended is None
    out = send(ledger, StuckTurnSweep(now_ms=1000 + BOUND_MS), now_ms=1000 + BOUND_MS)
    assert out.stuck_ended == "model_reply"
    (entry,) = out.entries
    error = entry.message
    assert isinstance(error, AssistantMessage)
    assert error.is_api_error_message
    assert error.blocks == [TextBlock(text=REQUEST_TIMED_OUT)]
    assert error.parent_uuid == "u1"
    assert out.interrupt_model
    assert (ledger.state.awaiting_model, ledger.state.turn_open) == (False, False)
    assert session_wait(ledger.state) is None
    # The reply that finally comes for the ended turn's request is dropped (as after an interrupt).
    late = send(ledger, AssistantReply(message=create_assistant_message("late"), request_seq=1), now_ms=99_000)
    assert late.entries == []


def test_a_reply_cut_mid_stream_keeps_its_finished_blocks_and_answers_their_calls(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="hi", uuid="u1"), now_ms=0)
    start = {
        "type": "message_start",
        "message": {"id": "m1", "type": "message", "role": "assistant", "model": "c", "content": [], "usage": {}},
    }
    events = [
        start,
        {"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t9", "name": "Read"}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 0},
    ]
    for event in events:
        send(ledger, StreamEvent(request_id="r1", event=event), now_ms=100)
    out = send(ledger, StuckTurnSweep(now_ms=100 + BOUND_MS), now_ms=100 + BOUND_MS)
    call, answer, error = (entry.message for entry in out.entries)
    assert isinstance(call, AssistantMessage)
    assert isinstance(answer, UserMessage)
    assert answer.blocks == [
        ToolResultBlock(tool_use_id="t9", content=SYNTHETIC_TOOL_RESULT_PLACEHOLDER, is_error=True)
    ]
    assert isinstance(error, AssistantMessage)
    assert error.is_api_error_message
    assert out.closed_tool_use_ids == ["t9"]
    assert ledger.state.open_replies == {}


def test_calls_whose_deadline_sweep_never_came_get_the_placeholder_and_the_loop_goes_on(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Read"))), now_ms=0)
    send(ledger, AssistantReply(message=reply_with_calls(("t2", "Read"), uuid="a2"), execute_tools=False), now_ms=5)
    out = send(ledger, StuckTurnSweep(now_ms=TOOL_DEADLINE_MS + BOUND_MS), now_ms=TOOL_DEADLINE_MS + BOUND_MS)
    assert out.stuck_ended == "tool_result"
    answered = [block.tool_use_id for e in out.entries for block in e.message.blocks if block.type == "tool_result"]  # type: ignore[union-attr]
    assert sorted(answered) == ["t1", "t2"]
    assert ledger.state.pending == {}
    assert out.interrupt_tools
    assert ledger.state.awaiting_model  # every call answered (R10.6): the model is asked again


def test_a_late_result_after_the_sweep_is_not_logged_twice(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=reply_with_calls(("t1", "Read"))), now_ms=0)
    send(ledger, StuckTurnSweep(now_ms=TOOL_DEADLINE_MS + BOUND_MS), now_ms=TOOL_DEADLINE_MS + BOUND_MS)
    result = create_user_message([ToolResultBlock(tool_use_id="t1", content="ok")], source_tool_assistant_uuid="a1")
    assert send(ledger, ToolResultReport(message=result), now_ms=TOOL_DEADLINE_MS + BOUND_MS + 1).entries == []


def test_a_stuck_sweep_from_a_producer_is_a_forgery() -> None:
    envelope = IngressEnvelope(session_id="s1", idempotency_key="k", payload=StuckTurnSweep(now_ms=1))
    assert forged_internal_problem(envelope, {}) is not None
