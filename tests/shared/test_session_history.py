"""When the normalizer asks the model (bus/session_history.py)."""

from __future__ import annotations

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    create_assistant_message,
    create_user_interruption_message,
    create_user_message,
)
from agentbus_redis.messages.kinds import Message, TombstoneMessage


def feed(history: SessionHistory, *messages: Message) -> None:
    for message in messages:
        history.apply(LogEntry(session_id="s", seq=history.applied_seq + 1, message=message))


def calls(*ids: str, message_id: str | None = None) -> Message:
    reply = create_assistant_message([ToolUseBlock(id=i, name="Read") for i in ids])
    if message_id is not None:
        reply = reply.model_copy(update={"message": reply.message.model_copy(update={"id": message_id})})
    return reply


def result(tool_use_id: str) -> Message:
    return create_user_message([ToolResultBlock(tool_use_id=tool_use_id, content="ok")])


def test_a_new_prompt_waits_for_the_model() -> None:
    history = SessionHistory("s")
    feed(history, create_user_message("hi"))
    assert history.needs_request()
    history.mark_published()
    assert not history.needs_request()


def test_waits_only_when_every_call_of_the_reply_is_answered() -> None:
    history = SessionHistory("s")
    feed(history, create_user_message("hi"), calls("t1", "t2"), result("t1"))
    assert not history.needs_request()
    feed(history, result("t2"))
    assert history.needs_request()


def test_split_reply_lines_count_as_one_reply() -> None:
    history = SessionHistory("s")
    feed(history, create_user_message("hi"), calls("t1", message_id="m"), result("t1"), calls("t2", message_id="m"))
    assert not history.needs_request()
    feed(history, result("t2"))
    assert history.needs_request()


def test_interrupt_notice_ends_the_turn() -> None:
    history = SessionHistory("s")
    feed(history, create_user_message("hi"), calls("t1"), result("t1"), create_user_interruption_message(tool_use=True))
    assert not history.needs_request()


def test_redelivered_entry_is_a_no_op() -> None:
    history = SessionHistory("s")
    entry = LogEntry(session_id="s", seq=1, message=create_user_message("hi"))
    assert history.apply(entry)
    assert not history.apply(entry)
    assert len(history.messages) == 1


def test_tombstoned_reply_is_ignored() -> None:
    history = SessionHistory("s")
    reply = calls("t1")
    feed(history, create_user_message("hi"), reply, TombstoneMessage(message=reply))
    assert history.needs_request()


def replay(history: SessionHistory, *messages: Message) -> None:
    for message in messages:
        history.apply(LogEntry(session_id="s", seq=history.applied_seq + 1, message=message, replayed=True))


def test_issue26_a_replayed_recording_never_asks_the_model() -> None:
    """A recording played back is history: its prompt (and its answered rounds) publish no request."""
    history = SessionHistory("s")
    replay(history, create_user_message("hi"), calls("t1"), result("t1"))
    assert not history.needs_request()
    replay(history, create_user_message("and again"))
    assert not history.needs_request()


def test_issue26_a_live_entry_after_a_replay_asks_for_the_whole_history() -> None:
    """``--continue-turn`` (the last message published live) or the next prompt: the model is due."""
    history = SessionHistory("s")
    replay(history, create_user_message("hi"), calls("t1"))
    feed(history, result("t1"))
    assert history.needs_request()
    assert len(history.messages) == 3
