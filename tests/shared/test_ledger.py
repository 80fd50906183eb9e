"""Ingestion rules (bus/ledger.py): sequencing, chain placement, tool jobs, placeholders,
tombstones and interrupts at the ingestion boundary."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    IngressPayload,
    Interrupt,
    LogEntry,
    RecordedMessage,
    StreamEvent,
    StreamFallback,
    ToolJobAbandoned,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.bus.live_reply import LiveDelta
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import (
    INTERRUPT_MESSAGE,
    INTERRUPT_MESSAGE_FOR_TOOL_USE,
    INTERRUPTED_BY_USER,
    SYNTHETIC_TOOL_RESULT_PLACEHOLDER,
)
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_assistant_message,
    create_user_message,
)
from agentbus_redis.messages.kinds import AssistantMessage, TombstoneMessage, UserMessage


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(100))


def send(ledger: SessionLedger, payload: IngressPayload, now_ms: int = 0) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload), now_ms=now_ms)


def assistant_with_calls(*ids: str, uuid: str = "a1") -> AssistantMessage:
    message = create_assistant_message([ToolUseBlock(id=i, name="Read", input={"file_path": i}) for i in ids])
    return message.model_copy(update={"uuid": uuid})


def result_for(tool_use_id: str, assistant_uuid: str = "a1", text: str = "ok") -> UserMessage:
    return create_user_message(
        [ToolResultBlock(tool_use_id=tool_use_id, content=text)], source_tool_assistant_uuid=assistant_uuid
    )


def test_r7_8_messages_get_seq_and_parent_chain(ledger: SessionLedger) -> None:
    first = send(ledger, UserPrompt(content="hi", uuid="u1"))
    second = send(ledger, AssistantReply(message=assistant_with_calls()))
    assert [e.seq for e in first.entries + second.entries] == [1, 2]
    assert first.entries[0].message.parent_uuid is None  # type: ignore[union-attr]
    assert second.entries[0].message.parent_uuid == "u1"  # type: ignore[union-attr]


def test_r8_5_a_reply_with_calls_becomes_one_tool_job(ledger: SessionLedger) -> None:
    out = send(ledger, AssistantReply(message=assistant_with_calls("t1", "t2")), now_ms=50)
    (job,) = out.tool_jobs
    assert [call.id for call in job.tool_uses] == ["t1", "t2"]
    assert job.assistant_uuid == "a1"
    assert job.deadline_ms == 1050


def test_recorded_reply_supplies_its_results_so_no_job_and_no_deadline(ledger: SessionLedger) -> None:
    out = send(ledger, AssistantReply(message=assistant_with_calls("t1"), execute_tools=False))
    assert out.tool_jobs == []
    assert ledger.expire(now_ms=10**12).entries == []


def test_r7_8_tool_result_hangs_off_its_assistant_and_closes_the_call(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1")))
    send(ledger, UserPrompt(content="meanwhile", uuid="u2"))
    out = send(ledger, ToolResultReport(message=result_for("t1")))
    assert out.entries[0].message.parent_uuid == "a1"  # type: ignore[union-attr]
    assert out.closed_tool_use_ids == ["t1"]


def test_second_result_for_an_answered_call_is_dropped(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1")))
    send(ledger, ToolResultReport(message=result_for("t1")))
    out = send(ledger, ToolResultReport(message=result_for("t1", text="again")))
    assert out.entries == []
    assert [d.reason for d in out.dropped] == ["duplicate_tool_result"]


def test_placeholder_rule_deadline_answers_missing_results(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1", "t2")), now_ms=0)
    send(ledger, ToolResultReport(message=result_for("t1")))
    assert ledger.expire(now_ms=999).entries == []
    out = ledger.expire(now_ms=1000)
    (entry,) = out.entries
    block = entry.message.blocks[0]  # type: ignore[union-attr]
    assert isinstance(block, ToolResultBlock)
    assert (block.tool_use_id, block.content, block.is_error) == ("t2", SYNTHETIC_TOOL_RESULT_PLACEHOLDER, True)
    # A late real result after the placeholder is a duplicate, never a second answer.
    assert send(ledger, ToolResultReport(message=result_for("t2"))).entries == []


def test_placeholder_rule_abandoned_job(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1")))
    out = send(ledger, ToolJobAbandoned(assistant_uuid="a1", tool_use_ids=["t1"], reason="max_deliveries"))
    assert out.closed_tool_use_ids == ["t1"]
    assert out.entries[0].message.source_tool_assistant_uuid == "a1"  # type: ignore[union-attr]


def _stream(request_id: str, *events: dict[str, Any]) -> list[StreamEvent]:
    return [StreamEvent(request_id=request_id, event=event) for event in events]


MESSAGE_START = {
    "type": "message_start",
    "message": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    },
}
TEXT_BLOCK = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading."}},
    {"type": "content_block_stop", "index": 0},
]
TOOL_BLOCK = [
    {
        "type": "content_block_start",
        "index": 1,
        "content_block": {"type": "tool_use", "id": "t9", "name": "Read", "input": {}},
    },
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": '{"file_pa'}},
    {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": 'th": "x"}'}},
    {"type": "content_block_stop", "index": 1},
]
FINISH: list[dict[str, Any]] = [
    {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {"output_tokens": 9},
    },
    {"type": "message_stop"},
]


def test_r9_4_stream_becomes_one_message_per_block_with_final_usage_and_one_job(ledger: SessionLedger) -> None:
    out = LedgerOutput()
    for event in _stream("r1", MESSAGE_START, *TEXT_BLOCK, *TOOL_BLOCK, *FINISH):
        out.extend(send(ledger, event))
    messages = [e.message for e in out.entries]
    assert [type(m) for m in messages] == [AssistantMessage, AssistantMessage]
    text, tool = messages
    assert isinstance(text, AssistantMessage)
    assert isinstance(tool, AssistantMessage)
    assert text.api_message_id == tool.api_message_id == "msg_1"
    assert tool.blocks == [ToolUseBlock(id="t9", name="Read", input={"file_path": "x"})]
    assert tool.message.stop_reason == "tool_use"  # R9.5 applied before the line is logged
    assert tool.parent_uuid == text.uuid
    (job,) = out.tool_jobs
    assert [c.id for c in job.tool_uses] == ["t9"]


def test_r6_1_stream_fallback_tombstones_partials_and_their_calls_never_run(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="go", uuid="u1"))
    out = LedgerOutput()
    for event in _stream("r1", MESSAGE_START, *TEXT_BLOCK, *TOOL_BLOCK):
        out.extend(send(ledger, event))
    assert out.tool_jobs == []
    fallback = send(ledger, StreamFallback(request_id="r1"))
    tombstones = [e.message for e in fallback.entries]
    assert all(isinstance(t, TombstoneMessage) for t in tombstones)
    assert len(tombstones) == 1  # the tool block was still held back, never logged
    assert ledger.state.chain_parent == "u1"
    # The non-streaming retry then hangs off the prompt again.
    retry = send(ledger, AssistantReply(message=assistant_with_calls("t9", uuid="a2")))
    assert retry.entries[0].message.parent_uuid == "u1"  # type: ignore[union-attr]


def test_malformed_stream_event_is_reported_and_kills_the_attempt(ledger: SessionLedger) -> None:
    out = send(ledger, StreamEvent(request_id="r1", event={"type": "content_block_delta", "index": 0, "delta": {}}))
    assert out.invalid is not None
    assert out.invalid.startswith("stream_event:")
    assert "r1" not in ledger.state.open_replies


def test_r10_1_interrupt_while_streaming(ledger: SessionLedger) -> None:
    for event in _stream("r1", MESSAGE_START, *TOOL_BLOCK, *TEXT_BLOCK):
        send(ledger, event)
    out = send(ledger, Interrupt(reason="user_cancel"))
    results = [e.message for e in out.entries]
    held, answer = results[0], results[1]
    # The text block finished before the abort: it was yielded (R9.4), so it is kept, after the tool block.
    assert isinstance(held, AssistantMessage)
    assert held.blocks[0].type == "text"
    assert isinstance(answer, UserMessage)
    assert answer.blocks == [ToolResultBlock(tool_use_id="t9", content=INTERRUPTED_BY_USER, is_error=True)]
    assert results[-1].blocks == [TextBlock(text=INTERRUPT_MESSAGE)]  # type: ignore[union-attr]
    assert out.interrupt_model


def test_r10_1_interrupt_answers_the_call_of_the_held_back_last_block(ledger: SessionLedger) -> None:
    for event in _stream("r1", MESSAGE_START, *TOOL_BLOCK):
        send(ledger, event)
    out = send(ledger, Interrupt(reason="user_cancel"))
    tool_message, answer, text = (e.message for e in out.entries)
    assert isinstance(tool_message, AssistantMessage)
    assert answer.blocks == [ToolResultBlock(tool_use_id="t9", content=INTERRUPTED_BY_USER, is_error=True)]  # type: ignore[union-attr]
    assert answer.parent_uuid == tool_message.uuid  # type: ignore[union-attr]
    assert text.blocks == [TextBlock(text=INTERRUPT_MESSAGE)]  # type: ignore[union-attr]


def test_r10_1_stream_of_an_interrupted_request_is_dropped_after_the_interrupt(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="go", uuid="u1"))
    send(ledger, Interrupt(reason="user_cancel"))  # nothing streamed yet: the model call is still waiting
    late = LedgerOutput()
    for event in _stream("r1", MESSAGE_START, *TEXT_BLOCK, *FINISH):
        late.extend(send(ledger, event.model_copy(update={"request_seq": 1})))
    assert late.entries == []
    assert {d.reason for d in late.dropped} == {"interrupted"}
    reply = send(ledger, AssistantReply(message=assistant_with_calls("t1"), request_seq=1))
    assert reply.entries == []
    assert reply.dropped[0].reason == "interrupted"
    # A request built after the interrupt (a new prompt) is answered as usual.
    send(ledger, UserPrompt(content="again", uuid="u2"))
    fresh = LedgerOutput()
    for event in _stream("r2", MESSAGE_START, *TEXT_BLOCK, *FINISH):
        fresh.extend(send(ledger, event.model_copy(update={"request_seq": ledger.state.seq})))
    assert len(fresh.entries) == 1


def test_r10_2_interrupt_while_tools_run(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1", "t2")))
    out = send(ledger, Interrupt(reason="user_cancel"))
    assert out.interrupt_tools
    assert out.interrupt_reason == "user_cancel"  # the tool workers stop every running call (bus/interrupts.py)
    assert out.entries == []
    send(ledger, ToolResultReport(message=result_for("t1")))
    last = send(ledger, ToolResultReport(message=result_for("t2")))
    assert last.entries[-1].message.blocks == [TextBlock(text=INTERRUPT_MESSAGE_FOR_TOOL_USE)]  # type: ignore[union-attr]


def test_r8_9_interrupt_by_new_message_adds_no_interrupt_text(ledger: SessionLedger) -> None:
    send(ledger, AssistantReply(message=assistant_with_calls("t1")))
    interrupted = send(ledger, Interrupt(reason="interrupt"))
    assert (interrupted.interrupt_tools, interrupted.interrupt_reason) == (True, "interrupt")  # block tools run on
    out = send(ledger, ToolResultReport(message=result_for("t1")))
    assert len(out.entries) == 1


# --- R10.1 with nothing collected: an interrupt while the request is pending vs while idle -----------------


def _texts(out: LedgerOutput) -> list[str]:
    return [
        block.text
        for entry in out.entries
        if isinstance(entry.message, UserMessage)
        for block in entry.message.blocks
        if isinstance(block, TextBlock)
    ]


def test_r10_1_interrupt_with_the_request_pending_writes_the_interrupt_text(ledger: SessionLedger) -> None:
    """A prompt came, nothing streamed yet: Claude Code's loop is in its model call (M4 checks the abort
    before each attempt), so the turn ends with ``[Request interrupted by user]``; a second interrupt finds
    the session idle and writes nothing."""
    send(ledger, UserPrompt(content="go", uuid="u1"))
    assert ledger.state.awaiting_model
    out = send(ledger, Interrupt(reason="user_cancel"))
    assert _texts(out) == [INTERRUPT_MESSAGE]
    assert out.entries[0].message.parent_uuid == "u1"  # type: ignore[union-attr]
    assert out.interrupt_model
    assert not ledger.state.awaiting_model
    again = send(ledger, Interrupt(reason="user_cancel"))
    assert again.entries == []


def test_r10_1_interrupt_after_a_round_completed_writes_the_interrupt_text(ledger: SessionLedger) -> None:
    """Every call of the round answered: the next request is due (R10.6), so an interrupt before its reply
    streams ends the turn with the text."""
    send(ledger, UserPrompt(content="go", uuid="u1"))
    send(ledger, AssistantReply(message=assistant_with_calls("t1", "t2")))
    send(ledger, ToolResultReport(message=result_for("t1")))
    assert not ledger.state.awaiting_model  # t2 still runs
    send(ledger, ToolResultReport(message=result_for("t2")))
    assert ledger.state.awaiting_model
    assert _texts(send(ledger, Interrupt(reason="user_cancel"))) == [INTERRUPT_MESSAGE]


def test_r10_1_interrupt_after_a_stream_fallback_writes_the_interrupt_text(ledger: SessionLedger) -> None:
    """A retracted attempt leaves the request waiting for the next one (M5): still in the model call."""
    send(ledger, UserPrompt(content="go", uuid="u1"))
    for event in _stream("r1", MESSAGE_START, *TEXT_BLOCK, *TOOL_BLOCK):
        send(ledger, event)
    send(ledger, StreamFallback(request_id="r1"))
    assert ledger.state.awaiting_model
    assert _texts(send(ledger, Interrupt(reason="user_cancel"))) == [INTERRUPT_MESSAGE]


def test_r10_idle_interrupt_after_the_turn_ended_writes_nothing(ledger: SessionLedger) -> None:
    """The last reply ended the turn: no query runs in Claude Code, an abort has nothing to abort."""
    send(ledger, UserPrompt(content="go", uuid="u1"))
    finish = [{**FINISH[0], "delta": {"stop_reason": "end_turn", "stop_sequence": None}}, FINISH[1]]
    for event in _stream("r1", MESSAGE_START, *TEXT_BLOCK, *finish):
        send(ledger, event)
    assert not ledger.state.awaiting_model
    out = send(ledger, Interrupt(reason="user_cancel"))
    assert out.entries == []
    assert out.interrupt_model  # a call in flight elsewhere is still told to stop


def test_r10_idle_interrupt_writes_nothing_on_a_new_session_or_after_an_error_or_an_empty_reply(
    ledger: SessionLedger,
) -> None:
    assert send(ledger, Interrupt(reason="user_cancel")).entries == []
    send(ledger, UserPrompt(content="go", uuid="u1"))
    error = create_assistant_api_error_message("API Error: Repeated 529 Overloaded errors")
    send(ledger, AssistantReply(message=error))  # M7: the error ends the turn
    assert send(ledger, Interrupt(reason="user_cancel")).entries == []
    send(ledger, UserPrompt(content="again", uuid="u2"))
    for event in _stream("r2", MESSAGE_START, *FINISH):  # a reply without a block is over too
        send(ledger, event)
    assert send(ledger, Interrupt(reason="user_cancel")).entries == []


def test_r10_1_interrupt_by_new_message_with_the_request_pending_writes_nothing(ledger: SessionLedger) -> None:
    """H5.2: reason ``interrupt`` (the user typed a new message) omits the text; the turn is closed all the
    same, so a later interrupt finds the session idle."""
    send(ledger, UserPrompt(content="go", uuid="u1"))
    assert send(ledger, Interrupt(reason="interrupt")).entries == []
    assert not ledger.state.awaiting_model
    assert send(ledger, Interrupt(reason="user_cancel")).entries == []


def test_issue26_a_replayed_recording_is_logged_marked_and_leaves_the_session_idle(ledger: SessionLedger) -> None:
    """Replayed messages are logged as recorded (no tool job, the file's results answer the calls), their
    entries are marked ``replayed``, and whatever the recording's last message is — a prompt, a round
    with every result — the model is not due and the turn is closed."""
    outputs = [
        send(ledger, RecordedMessage(message=message, replayed=True))
        for message in (create_user_message("hi"), assistant_with_calls("t1"), result_for("t1"))
    ]
    entries = [entry for out in outputs for entry in out.entries]
    assert [entry.replayed for entry in entries] == [True, True, True]
    assert all(out.tool_jobs == [] for out in outputs)
    assert not ledger.state.awaiting_model
    assert not ledger.state.turn_open
    send(ledger, RecordedMessage(message=create_user_message("a last recorded prompt"), replayed=True))
    assert not ledger.state.awaiting_model
    assert "replayed" not in send(ledger, UserPrompt(content="live", uuid="u9")).entries[0].to_wire()
    assert ledger.state.awaiting_model


def test_issue26_a_recorded_message_without_the_marker_still_opens_the_turn(ledger: SessionLedger) -> None:
    """Plain recorded messages (a producer recording a session as it goes) keep today's behaviour."""
    out = send(ledger, RecordedMessage(message=create_user_message("hi")))
    assert not out.entries[0].replayed
    assert ledger.state.awaiting_model


def test_a_record_made_by_its_validator_is_the_one_its_constructor_makes() -> None:
    """``WireModel.from_fields`` (the ledger's log entries, the live deltas) calls the validator directly: the same
    values, set fields and dump as ``Model(**fields)``, and still validated."""
    message = create_user_message("hi")
    for fields in (
        {"session_id": "s", "seq": 3, "message": message, "traceparent": None},
        {"session_id": "s", "seq": 3, "message": message, "traceparent": "t", "ingress_id": "1-0", "replayed": True},
    ):
        built, made = LogEntry.from_fields(dict(fields)), LogEntry(**fields)
        assert built == made
        assert built.model_fields_set == made.model_fields_set
        assert built.to_wire_json() == made.to_wire_json()
    delta = {"request_id": "r", "index": 0, "kind": "text", "text": "hé", "after_seq": 2}
    assert LiveDelta.from_fields(dict(delta)).to_wire_json() == LiveDelta(**delta).to_wire_json()
    with pytest.raises(ValidationError):
        LogEntry.from_fields({"session_id": "s", "seq": "x", "message": message})
