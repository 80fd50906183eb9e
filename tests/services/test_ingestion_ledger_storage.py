"""How ingestion stores a session's ledger (``workers/ingestion/ledger_cache.py``): the state JSON round
trips, and the wire objects inside it are dumped as wire objects (wire.py), R1.1 losslessness."""

from __future__ import annotations

import orjson

from agentbus_redis.bus.events import AssistantReply, IngressEnvelope, IngressPayload, StreamEvent, UserPrompt
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.workers.ingestion.ledger_cache import dump_state, load_state

START = {
    "type": "message_start",
    "message": {"id": "msg_1", "type": "message", "role": "assistant", "model": "m", "content": [], "usage": {}},
}
TEXT = [
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Reading."}},
    {"type": "content_block_stop", "index": 0},
]


def _ledger_mid_stream() -> SessionLedger:
    """A session with a call pending and a reply still streaming (its first block held back, R9.5)."""
    ledger = SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(1))
    payloads: list[IngressPayload] = [
        AssistantReply(message=create_assistant_message([ToolUseBlock(id="t1", name="Read", input={})])),
        *(StreamEvent(request_id="r1", event=event) for event in (START, *TEXT)),
    ]
    for number, payload in enumerate(payloads):
        ledger.apply(IngressEnvelope(session_id="s1", idempotency_key=f"k{number}", payload=payload), now_ms=0)
    return ledger


def test_the_stored_state_round_trips_with_fields_filled_in_place() -> None:
    state = _ledger_mid_stream().state
    # Default-factory fields, filled after construction:
    assert state.pending
    assert state.open_replies
    stored = dump_state(state)
    loaded = load_state(stored.encode())
    assert (loaded.seq, loaded.chain_parent, loaded.pending) == (state.seq, state.chain_parent, state.pending)
    assert loaded.open_replies.keys() == state.open_replies.keys()
    assert dump_state(loaded) == stored


def test_a_message_inside_the_state_is_stored_exactly_as_its_wire_form() -> None:
    state = _ledger_mid_stream().state
    held = state.open_replies["r1"].held
    assert held is not None
    stored = orjson.loads(dump_state(state))
    assert stored["open_replies"]["r1"]["held"] == held.to_wire()
    assert "events" not in stored["open_replies"]["r1"]  # kept in the reply's own list
    assert "closed_tool_use_ids" not in stored  # kept in the session's answered set


def test_a_payload_that_leaves_the_stored_state_as_it_was_says_so() -> None:
    """``LedgerOutput.state_changed`` is False only when the stored JSON is unchanged (ingestion then skips
    the write): true of content deltas, which only add to the reply's own event list."""
    ledger = SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(1))
    call = {"type": "tool_use", "id": "t1", "name": "Read", "input": {}}
    events = [
        START,
        *TEXT,
        {"type": "content_block_start", "index": 1, "content_block": call},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{}"}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 3}},
        {"type": "message_stop"},
    ]
    unchanged = 0
    for number, event in enumerate(events):
        before = dump_state(ledger.state)
        envelope = IngressEnvelope(
            session_id="s1", idempotency_key=f"k{number}", payload=StreamEvent(request_id="r1", event=event)
        )
        out = ledger.apply(envelope, now_ms=0)
        assert out.state_changed or dump_state(ledger.state) == before, event
        unchanged += not out.state_changed
    assert unchanged == 4  # two block starts and two deltas


def test_r10_1_the_model_is_due_flag_survives_the_store() -> None:
    """A session waiting for the model keeps waiting across a restart or a shard takeover, so an interrupt
    there still ends the turn with the interrupt text (bus/turn_state.py); a state stored before the
    flag existed reads as idle."""
    ledger = SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(1))
    prompt = IngressEnvelope(session_id="s1", idempotency_key="k", payload=UserPrompt(content="go", uuid="u1"))
    ledger.apply(prompt, now_ms=0)
    loaded = load_state(dump_state(ledger.state).encode())
    assert loaded.awaiting_model is True
    legacy = orjson.loads(dump_state(ledger.state))
    del legacy["awaiting_model"]
    assert load_state(orjson.dumps(legacy)).awaiting_model is False
