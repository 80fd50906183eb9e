"""Resume deserialization (R7.20) and the one-call resume_session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.errors import BrokenTranscriptChain
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import CONTINUE_FROM_WHERE_YOU_LEFT_OFF, NO_RESPONSE_REQUESTED, SYNTHETIC_MODEL
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.transcript import (
    KAIROS_TERMINAL_TOOLS,
    ResumeResult,
    TranscriptMessage,
    build_transcript,
    deserialize_for_resume,
    main_chain,
    read_transcript,
    resume_session,
)
from tests.shared.transcript_builders import (
    CLAUDE_CODE_CORPUS,
    assistant,
    jsonl,
    system,
    text,
    tool_result,
    tool_use,
    user,
)


def resume(data: str, **kwargs: object) -> ResumeResult:
    return resume_session(data, clock=FixedClock(), ids=SequentialIds(), **kwargs)  # type: ignore[arg-type]


def chain_of(data: str) -> list[TranscriptMessage]:
    """The chain ending at the last written message (``--resume <sessionId>`` picks the latest message
    of any kind, so trailing attachments and system messages are part of it)."""
    return main_chain(build_transcript(read_transcript(data)), "session_id")


def deserialize(data: str, **kwargs: object) -> ResumeResult:
    return deserialize_for_resume(chain_of(data), clock=FixedClock(), ids=SequentialIds(), **kwargs)  # type: ignore[arg-type]


def texts(message: TranscriptMessage) -> list[str]:
    blocks = message.blocks if isinstance(message, UserMessage | AssistantMessage) else []
    return [block.text for block in blocks if isinstance(block, TextBlock)]


def is_sentinel(message: TranscriptMessage) -> bool:
    return (
        isinstance(message, AssistantMessage)
        and message.message.model == SYNTHETIC_MODEL
        and texts(message) == [NO_RESPONSE_REQUESTED]
    )


# --- the two examples of R7.20, verbatim ---------------------------------------------------------


def test_r7_20_example_killed_during_the_tool() -> None:
    """Persisted [U "do X", A(tool_use t1)] → A removed → [U "do X"] → interrupted_prompt(U) →
    [U "do X", A "No response requested."]."""
    data = jsonl(user("U", None, "do X", second=1), assistant("A", "U", [tool_use("t1")], second=2))
    result = resume(data)
    assert [message.uuid for message in result.messages[:1]] == ["U"]
    assert len(result.messages) == 2
    assert is_sentinel(result.messages[1])
    assert result.interruption == "interrupted_prompt"
    assert result.interrupted_message is not None
    assert result.interrupted_message.uuid == "U"
    assert result.interrupted_message.message.content == "do X"


def test_r7_20_example_killed_after_the_tool_result() -> None:
    """[U "do X", A(t1), U(tr t1)] → interrupted_turn → [U, A, U(tr t1), U(meta) "Continue from where you
    left off.", A "No response requested."]."""
    data = jsonl(
        user("U", None, "do X", second=1),
        assistant("A", "U", [tool_use("t1")], second=2),
        user("TR", "A", [tool_result("t1")], second=3, toolUseResult={"stdout": "ok"}),
    )
    result = resume(data)
    assert [message.uuid for message in result.messages[:3]] == ["U", "A", "TR"]
    continuation = result.messages[3]
    assert isinstance(continuation, UserMessage)
    assert continuation.is_meta is True
    assert continuation.to_wire()["message"] == {
        "role": "user",
        "content": [{"type": "text", "text": CONTINUE_FROM_WHERE_YOU_LEFT_OFF}],
    }
    assert is_sentinel(result.messages[4])
    assert len(result.messages) == 5
    assert result.interruption == "interrupted_turn"
    assert result.interrupted_message is continuation


# --- steps 1-4 -----------------------------------------------------------------------------------


def _attachment(uuid: str, parent: str | None, attachment: dict[str, Any], second: int) -> dict[str, Any]:
    return {
        "type": "attachment",
        "attachment": attachment,
        "uuid": uuid,
        "parentUuid": parent,
        "timestamp": f"2026-01-01T00:00:0{second}.000Z",
        "cwd": "/home/alice/proj",
    }


def test_r7_20_1_legacy_attachments_are_migrated() -> None:
    data = jsonl(
        user("U", None, "hi", second=1),
        _attachment("F", "U", {"type": "new_file", "filename": "/home/alice/proj/src/a.py"}, 2),
        _attachment("D", "F", {"type": "new_directory", "path": "/home/alice/other"}, 3),
        _attachment("S", "D", {"type": "skill_listing", "skillDir": "/home/alice/proj/.claude/skills"}, 4),
        _attachment("K", "S", {"type": "file", "filename": "/x", "displayPath": "keep"}, 5),
        assistant("A", "K", [text("ok")], second=6),
    )
    by_uuid = {message.uuid: message for message in deserialize(data).messages}
    attachments = {uuid: m.attachment for uuid, m in by_uuid.items() if isinstance(m, AttachmentMessage)}
    assert attachments["F"] == {"type": "file", "filename": "/home/alice/proj/src/a.py", "displayPath": "src/a.py"}
    assert attachments["D"] == {"type": "directory", "path": "/home/alice/other", "displayPath": "../other"}
    assert attachments["S"]["displayPath"] == ".claude/skills"
    assert attachments["K"]["displayPath"] == "keep"
    custom = deserialize(data, cwd="/home/alice").messages
    migrated = next(m for m in custom if m.uuid == "F")
    assert isinstance(migrated, AttachmentMessage)
    assert migrated.attachment["displayPath"] == "proj/src/a.py"


@pytest.mark.parametrize(("mode", "kept"), [("plan", True), ("acceptEdits", True), ("yolo", False), (None, False)])
def test_r7_20_2_invalid_permission_modes_are_removed(mode: str | None, kept: bool) -> None:
    data = jsonl(user("U", None, "hi", permissionMode=mode), assistant("A", "U", [text("ok")], second=1))
    first = deserialize(data).messages[0]
    assert ("permissionMode" in first.to_wire()) is kept


def test_r7_20_3_only_fully_unresolved_assistants_are_removed() -> None:
    data = jsonl(
        user("U", None, "go", second=1),
        assistant("A1", "U", [text("both"), tool_use("t1"), tool_use("t2")], second=2),
        user("TR", "A1", [tool_result("t1")], second=3),
        assistant("A2", "TR", [tool_use("t3")], second=4),
        user("U2", "A2", "never mind", second=5),
        assistant("A3", "U2", [text("ok")], second=6),
    )
    uuids = [message.uuid for message in deserialize(data).messages]
    assert uuids == ["U", "A1", "TR", "U2", "A3"]


def test_r7_20_4_orphaned_thinking_only_assistant_is_dropped_unless_its_reply_has_content() -> None:
    thinking = {"type": "thinking", "thinking": "hmm", "signature": "sig"}
    data = jsonl(
        user("U", None, "go", second=1),
        assistant("T1", "U", [thinking], msg_id="msg_1", second=2),
        assistant("T2", "T1", [text("answer")], msg_id="msg_1", second=3),
        user("U2", "T2", "again", second=4),
        assistant("T3", "U2", [thinking], msg_id="msg_2", second=5),
        user("U3", "T3", "hello?", second=6),
        assistant("T4", "U3", [text("hi")], msg_id="msg_3", second=7),
    )
    uuids = [message.uuid for message in deserialize(data).messages]
    assert uuids == ["U", "T1", "T2", "U2", "U3", "T4"]


def test_r7_20_4_whitespace_only_assistant_is_dropped_and_users_merge() -> None:
    data = jsonl(
        user("U", None, "first", second=1),
        assistant("W", "U", [text("\n\n")], second=2),
        user("U2", "W", "second", second=3),
        assistant("A", "U2", [text("ok")], second=4),
    )
    messages = deserialize(data).messages
    assert [message.uuid for message in messages] == ["U", "A"]
    assert texts(messages[0]) == ["first\n", "second"]


# --- steps 5-7 -----------------------------------------------------------------------------------


def test_r7_20_5_meta_or_compact_summary_last_is_not_an_interruption() -> None:
    for flags in ({"isMeta": True}, {"isCompactSummary": True}):
        data = jsonl(user("U", None, "hi", second=1), assistant("A", "U", [text("x")], second=2))
        data += jsonl(user("M", "A", "note", second=3, **flags))
        result = deserialize(data)
        assert result.interruption == "none"
        assert is_sentinel(result.messages[-1])  # still a trailing user → sentinel (step 7)


def test_r7_20_5_attachment_last_is_an_interrupted_turn() -> None:
    data = jsonl(
        user("U", None, "hi", second=1),
        _attachment("F", "U", {"type": "todo", "content": [], "displayPath": "x"}, 2),
    )
    result = deserialize(data)
    assert result.interruption == "interrupted_turn"
    assert [message.type for message in result.messages] == ["user", "attachment", "user", "assistant"]


def test_r7_20_5_api_error_assistant_is_skipped_for_detection() -> None:
    error = assistant("E", "U", [text("API Error: 500")], second=2, isApiErrorMessage=True)
    error["message"]["model"] = SYNTHETIC_MODEL
    result = deserialize(jsonl(user("U", None, "do X", second=1), error))
    assert result.interruption == "interrupted_prompt"
    assert result.interrupted_message is not None
    assert result.interrupted_message.uuid == "U"
    assert [message.uuid for message in result.messages] == ["U", "E"]  # the last non-system is an assistant


def test_r7_20_5_tool_use_result_flag_makes_a_tool_result_message() -> None:
    data = jsonl(
        user("U", None, "hi", second=1),
        assistant("A", "U", [text("x")], second=2),
        user("R", "A", "Error: failed", second=3, toolUseResult="Error: failed"),
    )
    assert deserialize(data).interruption == "interrupted_turn"


def test_r7_20_5_terminal_tools_end_a_turn_in_brief_mode() -> None:
    data = jsonl(
        user("U", None, "hi", second=1),
        assistant("A", "U", [tool_use("t1", "SendUserMessage")], second=2),
        user("R", "A", [tool_result("t1")], second=3),
    )
    assert deserialize(data).interruption == "interrupted_turn"
    kairos = deserialize(data, terminal_tools=KAIROS_TERMINAL_TOOLS)
    assert kairos.interruption == "none"
    assert is_sentinel(kairos.messages[-1])


def test_r7_20_7_sentinel_goes_right_after_the_user_before_trailing_system() -> None:
    data = jsonl(user("U", None, "do X", second=1), system("S", "U", "turn_duration", second=2))
    result = deserialize(data)
    assert [message.type for message in result.messages] == ["user", "assistant", "system"]
    assert is_sentinel(result.messages[1])


def test_completed_turn_is_left_alone() -> None:
    data = jsonl(user("U", None, "hi", second=1), assistant("A", "U", [text("hello")], second=2))
    result = deserialize(data)
    assert result.interruption == "none"
    assert [message.uuid for message in result.messages] == ["U", "A"]


# --- resume_session ------------------------------------------------------------------------------


def test_resume_session_strips_chain_fields_and_reports_the_leaf() -> None:
    data = jsonl(user("U", None, "hi", second=1), assistant("A", "U", [text("hello")], second=2))
    result = resume(data)
    assert (result.leaf_uuid, result.session_id) == ("A", "s1")
    assert all("parentUuid" not in m.to_wire() and "isSidechain" not in m.to_wire() for m in result.messages)
    kept = resume(data, strip_chain_fields=False)
    assert kept.messages[1].parent_uuid == "U"


def test_resume_session_explicit_leaf() -> None:
    data = jsonl(
        user("U", None, "hi", second=1),
        assistant("A", "U", [text("hello")], second=2),
        user("FORK", "U", "edited", second=3),
    )
    assert resume(data).leaf_uuid == "FORK"
    assert [message.uuid for message in resume(data, leaf="A").messages] == ["U", "A"]
    with pytest.raises(BrokenTranscriptChain):
        resume(data, leaf="missing")


def test_resume_session_without_a_leaf_is_empty(corpus_root: Path) -> None:
    agent_file = corpus_root / CLAUDE_CODE_CORPUS / "CH-chuan__CommuGraph/agent-6f2b8f7b.jsonl"
    result = resume_session(agent_file.read_bytes(), clock=FixedClock(), ids=SequentialIds())
    assert result.messages == []
    assert result.interruption == "none"


def test_resume_session_tool_heavy_has_both_parallel_calls_and_real_results(corpus_root: Path) -> None:
    data = (corpus_root / CLAUDE_CODE_CORPUS / "marot__spotter/tool_heavy.jsonl").read_bytes()
    result = resume_session(data, clock=FixedClock(), ids=SequentialIds())
    calls = [
        b.id
        for m in result.messages
        if isinstance(m, AssistantMessage)
        for b in m.blocks
        if isinstance(b, ToolUseBlock)
    ]
    results = [
        b for m in result.messages if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, ToolResultBlock)
    ]
    assert "toolu_01DKTWcKpZ2ksZQmoKKfxiw6" in calls
    assert "toolu_01JJds55jYrYwd9TktNGndRY" in calls
    assert sorted(calls) == sorted(block.tool_use_id for block in results)
    assert all(block.content for block in results)  # real results, no placeholders
    # The whitespace-only "\n\n" reply (line 27) is dropped, so every run of adjacent user messages is
    # merged (R4.16): the trailing "[Request interrupted by user]" joins the last tool_result message,
    # which makes the last message a tool result → interrupted_turn, exactly as in Claude Code.
    assert result.interruption == "interrupted_turn"
    assert texts(result.messages[-2]) == [CONTINUE_FROM_WHERE_YOU_LEFT_OFF]
    assert is_sentinel(result.messages[-1])
    assert result.leaf_uuid is not None
    assert result.leaf_uuid.startswith("29e6224a")


@pytest.mark.parametrize(
    "relative",
    [
        "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
        "CH-chuan__CommuGraph/ab51623b-c26d-45f5-b98e-f9d0cfa17018.jsonl",
    ],
)
def test_resume_compacted_session_starts_at_boundary_and_summary(corpus_root: Path, relative: str) -> None:
    data = (corpus_root / CLAUDE_CODE_CORPUS / relative).read_bytes()
    result = resume_session(data, clock=FixedClock(), ids=SequentialIds())
    boundary, summary = result.messages[0], result.messages[1]
    assert isinstance(boundary, CompactBoundarySystemMessage)
    assert boundary.logical_parent_uuid is not None
    assert isinstance(summary, UserMessage)
    assert summary.is_compact_summary is True
    assert not any(isinstance(m, CompactBoundarySystemMessage) for m in result.messages[1:])


def test_resume_session_reports_malformed_lines(corpus_root: Path) -> None:
    data = (corpus_root / CLAUDE_CODE_CORPUS / "daaain__claude-code-log/edge_cases.jsonl").read_bytes()
    result = resume_session(data, clock=FixedClock(), ids=SequentialIds())
    assert [error.line_number for error in result.line_errors] == [13, 14, 15, 16]
    assert result.leaf_uuid == "edge_011"
