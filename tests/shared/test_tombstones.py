"""Tombstones (§6): emission (R6.1) and removal (R6.3)."""

from __future__ import annotations

from agentbus_redis.messages.content import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AssistantPayload,
    Message,
    ProgressMessage,
    StreamRequestStartMessage,
    TombstoneMessage,
    UserMessage,
    UserPayload,
    parse_message,
)
from agentbus_redis.messages.system import InformationalSystemMessage
from agentbus_redis.messages.tombstones import apply_tombstones, retracted_uuids, tombstones_for


def user(uuid: str, *content: TextBlock | ToolResultBlock) -> UserMessage:
    return UserMessage(message=UserPayload(role="user", content=list(content)), uuid=uuid, timestamp="t")


def assistant(
    uuid: str, *content: TextBlock | ToolUseBlock | ThinkingBlock, message_id: str = "m1"
) -> AssistantMessage:
    return AssistantMessage(
        message=AssistantPayload(id=message_id, model="claude-x", content=list(content)), uuid=uuid, timestamp="t"
    )


def tu(tool_use_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="Read", input={})


def tr(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content="ok")


def progress(uuid: str, tool_use_id: str) -> ProgressMessage:
    return ProgressMessage(data={"type": "bash_progress"}, tool_use_id=tool_use_id, uuid=uuid, timestamp="t")


def uuids(messages: list[Message]) -> list[str | None]:
    return [getattr(message, "uuid", None) for message in messages]


def test_r6_1_tombstones_for_every_assistant_of_the_failed_attempt() -> None:
    """R6.1: every assistant message collected in the iteration is tombstoned, in order; nothing else."""
    partial_thinking = assistant("a1", ThinkingBlock(thinking="hm", signature="sig"))
    partial_text = assistant("a2", TextBlock(text="par"))
    attempt: list[Message] = [partial_thinking, progress("p1", "t0"), partial_text, StreamRequestStartMessage()]
    tombstones = tombstones_for(attempt)
    assert [stone.message for stone in tombstones] == [partial_thinking, partial_text]
    assert tombstones[0].to_wire()["type"] == "tombstone"
    assert tombstones_for([]) == []


def test_r6_3_removes_exact_target_and_the_tombstone() -> None:
    """R6.3: the tombstoned message (by uuid) goes, its same-``message.id`` sibling stays."""
    kept_sibling = assistant("a1", TextBlock(text="keep"), message_id="m1")
    retracted = assistant("a2", TextBlock(text="partial"), message_id="m1")
    messages: list[Message] = [
        user("u1", TextBlock(text="go")),
        kept_sibling,
        retracted,
        TombstoneMessage(message=retracted),
    ]
    assert retracted_uuids(messages) == {"a2"}
    assert uuids(apply_tombstones(messages)) == ["u1", "a1"]


def test_r6_3_tombstone_matches_by_uuid_not_object_identity() -> None:
    """A tombstone read back from the wire is an equal copy, not the same object; the uuid decides."""
    retracted = assistant("a2", TextBlock(text="partial"))
    stone = parse_message(TombstoneMessage(message=retracted).to_wire())
    assert isinstance(stone, TombstoneMessage)
    assert stone.message is not retracted
    assert uuids(apply_tombstones([user("u1", TextBlock(text="go")), retracted, stone])) == ["u1"]


def test_r6_3_tombstone_before_its_target_still_retracts() -> None:
    retracted = assistant("a2", TextBlock(text="partial"))
    assert apply_tombstones([TombstoneMessage(message=retracted), retracted]) == []


def test_r6_3_no_tombstones_returns_same_messages() -> None:
    messages: list[Message] = [user("u1", TextBlock(text="go")), assistant("a1", tu("t1")), user("u2", tr("t1"))]
    result = apply_tombstones(messages)
    assert result == messages
    assert all(out is original for out, original in zip(result, messages, strict=True))


def test_r6_1_results_of_retracted_tool_use_removed() -> None:
    """R6.1: a retracted assistant's tool_use must never get a placeholder, and its results never
    reached the conversation: tool_result-only users and progress for it go; other blocks stay."""
    retracted = assistant("a1", tu("t1"), tu("t2"))
    final = assistant("a2", tu("t3"), message_id="m2")
    messages: list[Message] = [
        user("u0", TextBlock(text="go")),
        retracted,
        progress("p1", "t1"),
        TombstoneMessage(message=retracted),
        final,
        progress("p3", "t3"),
        user("u1", tr("t1")),
        user("u2", tr("t2"), tr("t3"), TextBlock(text="note")),
    ]
    result = apply_tombstones(messages)
    assert uuids(result) == ["u0", "a2", "p3", "u2"]
    survivor = result[-1]
    assert isinstance(survivor, UserMessage)
    assert survivor.message.content == [tr("t3"), TextBlock(text="note")]


def test_r6_1_tool_use_id_that_also_survives_keeps_its_results() -> None:
    """Only ids that existed *only* in retracted messages are withdrawn (the retry may reuse an id)."""
    retracted = assistant("a1", tu("t1"))
    retry = assistant("a2", tu("t1"), message_id="m2")
    messages: list[Message] = [retracted, TombstoneMessage(message=retracted), retry, user("u1", tr("t1"))]
    assert uuids(apply_tombstones(messages)) == ["a2", "u1"]


def test_r6_3_uuidless_target_matched_by_equality() -> None:
    marker = StreamRequestStartMessage()
    note = InformationalSystemMessage(content="x", uuid="s1", timestamp="t")
    assert apply_tombstones([marker, note, TombstoneMessage(message=marker)]) == [note]


def test_r6_3_tombstone_of_user_message() -> None:
    """The pure function retracts whatever it is told to; nothing in v2.1.88 tombstones users (R6.1)."""
    target = user("u2", TextBlock(text="x"))
    messages: list[Message] = [user("u1", TextBlock(text="go")), target, TombstoneMessage(message=target)]
    assert uuids(apply_tombstones(messages)) == ["u1"]
