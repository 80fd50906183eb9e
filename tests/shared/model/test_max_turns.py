"""A3.8 / R10.6 ``maxTurns`` (model/max_turns.py) and where the rule is read: the normalizer's
trigger (bus/session_history.py), a child's turn (agents/turn.py), a watcher's turn
(bus/conversation.py), the internal-event check (bus/internal_events.py) and the API request."""

from __future__ import annotations

from agentbus_redis.agents.turn import may_end_turn, turn_outcome
from agentbus_redis.bus.conversation import TurnTracker
from agentbus_redis.bus.events import AttachmentNotice, IngressEnvelope, LogEntry
from agentbus_redis.bus.internal_events import forged_internal_problem
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from agentbus_redis.model.limits.max_turns import (
    ended_at_max_turns,
    is_max_turns_reached,
    max_turns_attachment,
    next_turn_count,
    over_max_turns,
    turns_in_request,
)
from agentbus_redis.model.limits.window import OUTPUT_TOKEN_RECOVERY_MESSAGE
from agentbus_redis.normalize import to_api_request


def request(*messages: JsonObject) -> JsonObject:
    return {"messages": list(messages)}


PROMPT: JsonObject = {"role": "user", "content": "look"}
CALL: JsonObject = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}]}
RESULT: JsonObject = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
ANSWER: JsonObject = {"role": "assistant", "content": [{"type": "text", "text": "done"}]}


def attachment(max_turns: int = 1, turn_count: int = 2) -> Message:
    return max_turns_attachment(
        max_turns=max_turns, turn_count=turn_count, uuid="u-max", timestamp="2026-01-01T00:00:00Z"
    )


def test_a3_8_the_turn_count_is_the_assistant_messages_since_the_prompt() -> None:
    assert turns_in_request(request(PROMPT)) == 0
    assert next_turn_count(request(PROMPT)) == 1
    assert turns_in_request(request(PROMPT, CALL, RESULT)) == 1
    assert turns_in_request(request(PROMPT, CALL, RESULT, CALL, RESULT)) == 2
    # A new prompt (a SendMessage to a finished agent) starts a new turn and a new count.
    assert turns_in_request(request(PROMPT, CALL, RESULT, ANSWER, {"role": "user", "content": "again"})) == 0


def test_a3_8_the_output_limit_recovery_message_continues_the_turn() -> None:
    recovery: JsonObject = {"role": "user", "content": [{"type": "text", "text": OUTPUT_TOKEN_RECOVERY_MESSAGE}]}
    assert turns_in_request(request(PROMPT, ANSWER, recovery)) == 1


def test_a3_8_the_call_after_max_turns_replies_is_over_the_limit() -> None:
    assert not over_max_turns(request(PROMPT), 1)
    assert over_max_turns(request(PROMPT, CALL, RESULT), 1)
    assert not over_max_turns(request(PROMPT, CALL, RESULT), 2)
    assert not over_max_turns(request(PROMPT, CALL, RESULT, CALL, RESULT), None)


def test_r1_5_the_attachment_shape() -> None:
    message = attachment(3, 4)
    assert message.to_wire() == {
        "type": "attachment",
        "attachment": {"type": "max_turns_reached", "maxTurns": 3, "turnCount": 4},
        "uuid": "u-max",
        "timestamp": "2026-01-01T00:00:00Z",
    }
    assert is_max_turns_reached(message)


def test_r4_the_attachment_produces_nothing_for_the_api() -> None:
    call = create_assistant_message([TextBlock(text="Looking."), ToolUseBlock(id="t1", name="Read", input={})])
    done = create_user_message([ToolResultBlock(tool_use_id="t1", content="ok")])
    with_it = to_api_request([create_user_message("look"), call, done, attachment()]).request
    without = to_api_request([create_user_message("look"), call, done]).request
    assert with_it["messages"] == without["messages"]


def feed(history: SessionHistory, *messages: Message) -> None:
    for message in messages:
        history.apply(LogEntry(session_id="s", seq=history.applied_seq + 1, message=message))


def test_a3_8_the_normalizer_stops_waiting_for_the_model_after_the_attachment() -> None:
    history = SessionHistory("s")
    call = create_assistant_message([ToolUseBlock(id="t1", name="Read", input={})])
    feed(
        history,
        create_user_message("look"),
        call,
        create_user_message([ToolResultBlock(tool_use_id="t1", content="ok")]),
    )
    assert history.needs_request()
    history.mark_published()
    feed(history, attachment())
    assert not history.needs_request()
    feed(history, create_user_message("go on"))  # a new prompt: a new turn
    assert history.needs_request()


def test_a3_8_a_childs_turn_is_completed_at_the_attachment_and_its_last_text_is_kept() -> None:
    call = create_assistant_message([TextBlock(text="Looking once."), ToolUseBlock(id="t1", name="Read", input={})])
    done = create_user_message([ToolResultBlock(tool_use_id="t1", content="ok")])
    log: list[Message] = [create_user_message("look"), call, done]
    assert turn_outcome(log).state == "running"
    assert may_end_turn(attachment())
    outcome = turn_outcome([*log, attachment()])
    assert outcome.state == "completed"
    assert outcome.messages[-1] is done  # the result is built from the assistant text (A5.1)
    assert ended_at_max_turns([*log, attachment()])
    assert not ended_at_max_turns([*log, attachment(), create_user_message("again")])


def test_a3_8_a_watchers_turn_ends_with_stop_reason_max_turns() -> None:
    tracker = TurnTracker("i-1")
    call = create_assistant_message([ToolUseBlock(id="t1", name="Read", input={})])
    call = call.model_copy(update={"message": call.message.model_copy(update={"stop_reason": "tool_use"})})
    entries: list[Message] = [
        create_user_message("look"),
        call,
        create_user_message([ToolResultBlock(tool_use_id="t1", content="ok")]),
        attachment(),
    ]
    for seq, message in enumerate(entries, start=1):
        tracker.on_log(LogEntry(session_id="s", seq=seq, message=message, ingress_id=f"i-{seq}"))
    assert tracker.end is not None
    assert (tracker.end.stop_reason, tracker.end.replies) == ("max_turns", 1)


def test_a3_8_only_the_model_worker_may_end_a_turn_at_max_turns() -> None:
    forged = IngressEnvelope(session_id="s", idempotency_key="k", payload=AttachmentNotice(message=attachment()))
    problem = forged_internal_problem(forged, {})
    assert problem is not None
    assert "max_turns_reached" in problem
    other = max_turns_attachment(max_turns=1, turn_count=2, uuid="u", timestamp="t").model_copy(
        update={"attachment": {"type": "todo_reminder"}}
    )
    fine = IngressEnvelope(session_id="s", idempotency_key="k", payload=AttachmentNotice(message=other))
    assert forged_internal_problem(fine, {}) is None
