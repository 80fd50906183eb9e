"""Ingestion rules for bad input from live producers (bus/ledger.py): what is refused before it is
logged, so one bad entry cannot disturb a session (issue 4: bad input is dead-lettered with a reason)."""

from __future__ import annotations

import pytest

from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    IngressPayload,
    RecordedMessage,
    StreamEvent,
    StreamFallback,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock, UnknownBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import UserMessage


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(100))


def send(ledger: SessionLedger, payload: IngressPayload) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload), now_ms=0)


def result_for(*tool_use_ids: str) -> UserMessage:
    return create_user_message([ToolResultBlock(tool_use_id=i, content="ok") for i in tool_use_ids])


def malformed_text() -> UnknownBlock:
    return UnknownBlock.model_validate({"type": "text"})


def test_r8_1_live_result_for_a_call_never_made_is_invalid_and_not_logged(ledger: SessionLedger) -> None:
    out = send(ledger, ToolResultReport(message=result_for("toolu_never")))
    assert out.entries == []
    assert out.invalid is not None
    assert "toolu_never" in out.invalid
    assert ledger.state.seq == 0


def test_r8_1_live_result_without_tool_result_block_is_invalid(ledger: SessionLedger) -> None:
    out = send(ledger, ToolResultReport(message=create_user_message("just text")))
    assert out.entries == []
    assert out.invalid is not None
    assert "no tool_result" in out.invalid


def test_r8_1_live_result_for_a_made_call_is_logged(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=create_assistant_message([ToolUseBlock(id="t1", name="Read", input={})])))
    out = send(ledger, ToolResultReport(message=result_for("t1")))
    assert out.invalid is None
    assert len(out.entries) == 1


def test_r7_20_recorded_result_for_an_unknown_call_is_logged_as_recorded(ledger: SessionLedger) -> None:
    """Replay keeps the recorded history: the normalizer repairs orphans (R4.25), ingestion does not judge."""
    out = send(ledger, RecordedMessage(message=result_for("toolu_compacted_away")))
    assert out.invalid is None
    assert len(out.entries) == 1


def test_r6_1_result_for_a_retracted_call_is_dropped_not_invalid(ledger: SessionLedger) -> None:
    """A call of a tombstoned (fallen-back) streaming reply is known: its late result is dropped."""
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "m1",
                "type": "message",
                "role": "assistant",
                "model": "x",
                "content": [],
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        },
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t9", "name": "Read", "input": {}},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_stop", "index": 1},
    ]
    for event in events:
        assert send(ledger, StreamEvent(request_id="r1", event=event)).invalid is None
    fallback = send(ledger, StreamFallback(request_id="r1"))
    assert fallback.retracted_uuids
    out = send(ledger, ToolResultReport(message=result_for("t9")))
    assert out.invalid is None
    assert out.entries == []
    assert [d.reason for d in out.dropped] == ["retracted"]


def test_malformed_block_in_a_live_prompt_is_invalid_and_not_logged(ledger: SessionLedger) -> None:
    out = send(ledger, UserPrompt(content=[TextBlock(text="fine"), malformed_text()]))
    assert out.entries == []
    assert out.invalid is not None
    assert "content block 1" in out.invalid


def test_malformed_block_in_a_live_reply_is_invalid_and_runs_nothing(ledger: SessionLedger) -> None:
    reply = create_assistant_message([ToolUseBlock(id="t1", name="Read", input={}), malformed_text()])
    out = send(ledger, AssistantReply(message=reply))
    assert out.entries == []
    assert out.tool_jobs == []
    assert out.invalid is not None
    assert "malformed 'text'" in out.invalid


def test_recorded_message_keeps_a_malformed_block_losslessly(ledger: SessionLedger) -> None:
    recorded = create_user_message([TextBlock(text="fine"), malformed_text()])
    out = send(ledger, RecordedMessage(message=recorded))
    assert out.invalid is None
    assert len(out.entries) == 1
