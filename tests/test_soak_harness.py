"""The soak's judgement (bench/soak.py), on hand-made logs: a turn is ended, open (hung) or absent (lost)
exactly as the soak reports it, and the counts it draws from the model servers' journals read the session
the way the servers do. The soak itself runs on demand (tests/integration/test_soak.py, marker ``soak``)."""

from __future__ import annotations

import json

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from bench.soak import duplicate_uuids, session_of_body, turn_of


def log(*messages: Message) -> list[LogEntry]:
    return [LogEntry(session_id="s", seq=n, message=m) for n, m in enumerate(messages, start=1)]


def prompt(uuid: str) -> Message:
    return create_user_message(f"soak s turn {uuid}", uuid=uuid)


def answer(text: str) -> Message:
    message = create_assistant_message([TextBlock(text=text)])
    return message.model_copy(update={"message": message.message.model_copy(update={"stop_reason": "end_turn"})})


def call(tool_id: str) -> Message:
    message = create_assistant_message([ToolUseBlock(id=tool_id, name="Bash", input={"command": "echo x"})])
    return message.model_copy(update={"message": message.message.model_copy(update={"stop_reason": "tool_use"})})


def result(tool_id: str) -> Message:
    return create_user_message([ToolResultBlock(tool_use_id=tool_id, content="x")])


def test_a_turn_ends_with_the_models_last_reply_and_not_before() -> None:
    assert turn_of(log(prompt("p1"), call("t1"), result("t1"), answer("done")), "p1") == "ended"
    assert turn_of(log(prompt("p1"), call("t1"), result("t1")), "p1") == "open"
    assert turn_of(log(prompt("p1"), call("t1")), "p1") == "open"
    assert turn_of(log(prompt("p1")), "p1") == "open"


def test_a_prompt_missing_from_the_log_is_absent() -> None:
    assert turn_of(log(prompt("p1"), answer("done")), "p2") == "absent"


def test_each_turn_is_judged_up_to_the_next_prompt() -> None:
    history = log(prompt("p1"), call("t1"), prompt("p2"), answer("done"))
    assert turn_of(history, "p1") == "open"  # a later turn's end does not end an earlier hung one
    assert turn_of(history, "p2") == "ended"


def test_repeated_uuids_are_counted_once_per_repeat() -> None:
    assert duplicate_uuids(["a", "b", "a", "a", None, ""]) == 2
    assert duplicate_uuids(["a", "b"]) == 0


def test_the_session_of_a_request_is_read_from_metadata_user_id() -> None:
    body = {"metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "soak-1"})}}
    assert session_of_body(body) == "soak-1"
    assert session_of_body({"metadata": {"user_id": "not json"}}) is None
    assert session_of_body({}) is None
