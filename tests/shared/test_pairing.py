"""ensure_tool_result_pairing (§4.6, R4.25–R4.30) and the pairing queries."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.errors import AgentbusError
from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.constants import (
    NO_CONTENT_MESSAGE,
    ORPHANED_TOOL_RESULT_REMOVED,
    SYNTHETIC_TOOL_RESULT_PLACEHOLDER,
    TOOL_USE_INTERRUPTED,
)
from agentbus_redis.messages.content import (
    ContentBlock,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    UnknownBlock,
)
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, AssistantPayload, UserMessage, UserPayload
from agentbus_redis.messages.pairing import (
    PairingFix,
    PairingRepairRequired,
    PairingReport,
    ensure_tool_result_pairing,
    tool_result_ids,
    tool_use_ids,
    unpaired_tool_use_ids,
)

_counter = iter(range(1, 1_000_000))


def _uuid() -> str:
    return f"msg-{next(_counter)}"


def user(*content: ContentBlock | str, is_meta: bool | None = None) -> UserMessage:
    """A user message; a single string argument stays string content."""
    payload: str | list[ContentBlock]
    if len(content) == 1 and isinstance(content[0], str):
        payload = content[0]
    else:
        payload = [TextBlock(text=item) if isinstance(item, str) else item for item in content]
    return UserMessage(message=UserPayload(role="user", content=payload), uuid=_uuid(), timestamp="t", is_meta=is_meta)


def assistant(*content: ContentBlock | str, message_id: str | None = None) -> AssistantMessage:
    blocks: list[ContentBlock] = [TextBlock(text=item) if isinstance(item, str) else item for item in content]
    payload = AssistantPayload(id=message_id or _uuid(), model="claude-x", content=blocks)
    return AssistantMessage(message=payload, uuid=_uuid(), timestamp="t")


def tu(tool_use_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="Bash", input={"command": "ls"})


def tr(tool_use_id: str, content: str = "ok") -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content=content)


def render(messages: Sequence[ApiMessage]) -> list[str]:
    """Compact notation of §4.6: ``U[tr t1, text hi]``, ``U(meta)[ph t1]``, ``A[t1, text x]``."""
    rendered: list[str] = []
    for message in messages:
        content = message.message.content
        if isinstance(content, str):
            head = "U" if isinstance(message, UserMessage) else "A"
            meta = "(meta)" if isinstance(message, UserMessage) and message.is_meta else ""
            rendered.append(f"{head}{meta}{content!r}")
            continue
        items: list[str] = []
        for block in content:
            if isinstance(block, ToolResultBlock):
                is_placeholder = block.content == SYNTHETIC_TOOL_RESULT_PLACEHOLDER and block.is_error
                items.append(f"{'ph' if is_placeholder else 'tr'} {block.tool_use_id}")
            elif isinstance(block, ToolUseBlock):
                items.append(block.id)
            elif isinstance(block, TextBlock):
                items.append(f"text {block.text}")
            else:
                items.append(block.type)
        if isinstance(message, UserMessage):
            rendered.append(f"U{'(meta)' if message.is_meta else ''}[{', '.join(items)}]")
        else:
            rendered.append(f"A[{', '.join(items)}]")
    return rendered


def pair(messages: Sequence[ApiMessage], *, strict: bool = False) -> tuple[list[ApiMessage], PairingReport]:
    return ensure_tool_result_pairing(messages, strict=strict, clock=FixedClock(), ids=SequentialIds())


def placeholder_wire(tool_use_id: str) -> dict[str, JsonValue]:
    return {
        "type": "tool_result",
        "tool_use_id": tool_use_id,
        "content": "[Tool result missing due to internal error]",
        "is_error": True,
    }


# --- the six examples of §4.6, verbatim ---------------------------------------------------------


def test_r4_28_example_missing_first_result_gets_placeholder_first() -> None:
    """§4.6: ``[U, A[t1,t2], U[tr t2]]`` → ``[U, A[t1,t2], U[tr t1 (placeholder, is_error), tr t2]]``."""
    messages: list[ApiMessage] = [user("go"), assistant(tu("t1"), tu("t2")), user(tr("t2"))]
    result, report = pair(messages)
    assert render(result) == ["U'go'", "A[t1, t2]", "U[ph t1, tr t2]"]
    assert result[2].message.content[0].to_wire() == placeholder_wire("t1")  # type: ignore[union-attr]
    assert result[2].uuid == messages[2].uuid
    assert report.placeholders_inserted == (PairingFix(tool_use_id="t1", message_index=1),)


def test_r4_29_example_turn_ended_before_results() -> None:
    """§4.6: ``[U, A[t1]]`` → ``[U, A[t1], U(meta)[tr t1 placeholder]]``."""
    result, report = pair([user("go"), assistant(tu("t1"))])
    assert render(result) == ["U'go'", "A[t1]", "U(meta)[ph t1]"]
    inserted = result[2]
    assert isinstance(inserted, UserMessage)
    assert inserted.to_wire() == {
        "uuid": "00000000-0000-4000-8000-000000000001",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "type": "user",
        "message": {"role": "user", "content": [placeholder_wire("t1")]},
        "isMeta": True,
    }
    assert report.inserted_messages == (2,)


def test_r4_25_example_leading_orphan_result_becomes_text() -> None:
    """§4.6: ``[U[tr t9], A, …]`` → ``[U[text "[Orphaned tool result removed due to conversation resume]"], A, …]``."""
    messages: list[ApiMessage] = [user(tr("t9")), assistant("hello"), user("next")]
    result, report = pair(messages)
    assert render(result) == [f"U[text {ORPHANED_TOOL_RESULT_REMOVED}]", "A[text hello]", "U'next'"]
    assert result[0].message.content[0].to_wire() == {  # type: ignore[union-attr]
        "type": "text",
        "text": "[Orphaned tool result removed due to conversation resume]",
    }
    assert result[0].uuid == messages[0].uuid
    assert report.orphan_results_dropped == (PairingFix(tool_use_id="t9", message_index=0),)


def test_r4_28_example_duplicate_result_dropped() -> None:
    """§4.6: ``[U, A[t1], U[tr t1, tr t1]]`` → ``[U, A[t1], U[tr t1]]`` (first kept)."""
    first, second = tr("t1", "first"), tr("t1", "second")
    result, report = pair([user("go"), assistant(tu("t1")), user(first, second)])
    assert render(result) == ["U'go'", "A[t1]", "U[tr t1]"]
    assert result[2].message.content == [first]
    assert report.duplicate_results_dropped == (PairingFix(tool_use_id="t1", message_index=2),)
    assert report.placeholders_inserted == ()


def test_r4_26_example_cross_message_duplicate_tool_use() -> None:
    """§4.6: ``[U, A1[t1], U[tr t1], A2[t1], U[tr t1]]`` (different message.id) → A2's t1 dropped →
    ``[text "[Tool use interrupted]"]``; its next U's tr t1 is orphaned → removed → ``U(meta,"(no content)")``."""
    messages: list[ApiMessage] = [
        user("go"),
        assistant(tu("t1"), message_id="m1"),
        user(tr("t1")),
        assistant(tu("t1"), message_id="m2"),
        user(tr("t1")),
    ]
    result, report = pair(messages)
    assert render(result) == ["U'go'", "A[t1]", "U[tr t1]", f"A[text {TOOL_USE_INTERRUPTED}]", "U(meta)'(no content)'"]
    assert result[3].message.content[0].to_wire() == {  # type: ignore[union-attr]
        "type": "text",
        "text": "[Tool use interrupted]",
        "citations": [],
    }
    assert result[3].message.id == "m2"  # type: ignore[union-attr]
    assert result[4].message.content == NO_CONTENT_MESSAGE
    assert report.duplicate_tool_uses_dropped == (PairingFix(tool_use_id="t1", message_index=3),)
    assert report.interrupted_assistants == (3,)
    assert report.orphan_results_dropped == (PairingFix(tool_use_id="t1", message_index=4),)
    assert report.emptied_messages == (4,)


def test_r4_27_example_result_not_adjacent() -> None:
    """§4.6 [OBS]: ``[A1[t1], U[text hi], A2[text], U[tr t1]]`` →
    ``[A1[t1], U[tr t1 placeholder, text hi], A2[text], U(meta,"(no content)")]``."""
    messages: list[ApiMessage] = [assistant(tu("t1")), user(TextBlock(text="hi")), assistant("later"), user(tr("t1"))]
    result, _ = pair(messages)
    assert render(result) == ["A[t1]", "U[ph t1, text hi]", "A[text later]", "U(meta)'(no content)'"]


# --- edge cases -----------------------------------------------------------------------------------


def test_r4_25_paired_history_is_returned_unchanged() -> None:
    messages: list[ApiMessage] = [
        user("go"),
        assistant("thinking aloud", tu("t1")),
        user(tr("t1"), TextBlock(text="more")),
        assistant("done"),
    ]
    result, report = pair(messages)
    assert all(out is original for out, original in zip(result, messages, strict=True))
    assert report == PairingReport()
    assert not report.repaired
    assert report.summary() == "no repair"


def test_r4_25_string_content_users_pass_untouched() -> None:
    messages: list[ApiMessage] = [user("first"), user("second"), assistant("a"), user("third")]
    result, report = pair(messages)
    assert all(out is original for out, original in zip(result, messages, strict=True))
    assert not report.repaired


def test_r4_25_orphan_results_removed_text_kept() -> None:
    """R4.25: only the tool_result blocks go; other blocks of the message stay, in order."""
    result, report = pair([user(tr("t9"), TextBlock(text="x"), tr("t8")), assistant("a")])
    assert render(result) == ["U[text x]", "A[text a]"]
    assert [fix.tool_use_id for fix in report.orphan_results_dropped] == ["t9", "t8"]


def test_r4_25_emptied_user_after_user_is_dropped() -> None:
    """R4.25: emptied and not the first output → dropped."""
    result, report = pair([user("hi"), user(tr("t9")), assistant("a")])
    assert render(result) == ["U'hi'", "A[text a]"]
    assert report.dropped_messages == (1,)


def test_r4_25_orphan_after_consumed_user_is_stripped() -> None:
    """R4.25: the previous *output* entry decides — after a consumed/patched user, results are orphans."""
    messages: list[ApiMessage] = [
        user("go"),
        assistant(tu("t1")),
        user("typed while running"),
        user(tr("t1")),
        assistant("a"),
    ]
    result, report = pair(messages)
    assert render(result) == ["U'go'", "A[t1]", "U[ph t1, text typed while running]", "A[text a]"]
    assert report.dropped_messages == (3,)
    assert report.orphan_results_dropped == (PairingFix(tool_use_id="t1", message_index=3),)


def test_r4_25_malformed_tool_result_is_stripped_as_orphan() -> None:
    malformed = UnknownBlock(type="tool_result", content="no id")
    result, report = pair([user(malformed, TextBlock(text="x"))])
    assert render(result) == ["U[text x]"]
    assert report.orphan_results_dropped == (PairingFix(tool_use_id=None, message_index=0),)


def test_r4_26_server_tool_use_without_result_dropped() -> None:
    """R4.26: a server/mcp tool use is kept only with its result block in the same assistant."""
    answered = ServerToolUseBlock(type="server_tool_use", id="srv1", name="web_search", input={})
    result_block = ServerToolResultBlock(type="web_search_tool_result", tool_use_id="srv1", content=[])
    unanswered = ServerToolUseBlock(type="server_tool_use", id="srv2", name="web_search", input={})
    mcp = ServerToolUseBlock(type="mcp_tool_use", id="mcp1", name="x", input={})
    messages: list[ApiMessage] = [user("go"), assistant(answered, result_block, unanswered, mcp, "text")]
    result, report = pair(messages)
    assert [block.type for block in result[1].message.content] == ["server_tool_use", "web_search_tool_result", "text"]  # type: ignore[union-attr]
    assert report.server_tool_uses_dropped == (
        PairingFix(tool_use_id="srv2", message_index=1),
        PairingFix(tool_use_id="mcp1", message_index=1),
    )
    assert report.interrupted_assistants == ()


def test_r4_26_assistant_emptied_by_server_cleanup_is_interrupted() -> None:
    orphan_use = ServerToolUseBlock(type="server_tool_use", id="srv1", name="advisor", input={})
    result, report = pair([user("go"), assistant(orphan_use)])
    assert render(result) == ["U'go'", f"A[text {TOOL_USE_INTERRUPTED}]"]
    assert report.interrupted_assistants == (1,)


def test_r4_26_originally_empty_assistant_stays_empty() -> None:
    """R4.26 only fills content the cleanup *emptied*; an empty final assistant (prefill) stays ``[]``."""
    empty = assistant()
    result, report = pair([user("go"), empty])
    assert result[1] is empty
    assert not report.repaired


def test_r4_26_duplicate_within_one_assistant() -> None:
    """R4.26: the second occurrence of an id in the same assistant is dropped; one result answers it."""
    result, report = pair([user("go"), assistant(tu("t1"), tu("t1")), user(tr("t1"), tr("t1"))])
    assert render(result) == ["U'go'", "A[t1]", "U[tr t1]"]
    assert report.duplicate_tool_uses_dropped == (PairingFix(tool_use_id="t1", message_index=1),)
    assert report.duplicate_results_dropped == (PairingFix(tool_use_id="t1", message_index=2),)


def test_r4_28_string_next_user_becomes_blocks_after_placeholders() -> None:
    """R4.28: a string next message becomes one text block, after the placeholders."""
    result, _ = pair([user("go"), assistant(tu("t1")), user("stop")])
    assert render(result) == ["U'go'", "A[t1]", "U[ph t1, text stop]"]


def test_r4_28_placeholders_precede_real_results_in_tool_use_order() -> None:
    messages: list[ApiMessage] = [
        user("go"),
        assistant(tu("t1"), tu("t2"), tu("t3")),
        user(tr("t3"), TextBlock(text="x"), tr("t9")),
    ]
    result, report = pair(messages)
    assert render(result) == ["U'go'", "A[t1, t2, t3]", "U[ph t1, ph t2, tr t3, text x]"]
    assert [fix.tool_use_id for fix in report.placeholders_inserted] == ["t1", "t2"]
    assert report.orphan_results_dropped == (PairingFix(tool_use_id="t9", message_index=2),)


def test_r4_28_patched_user_keeps_its_envelope() -> None:
    original = user(tr("t9"), TextBlock(text="x"), is_meta=True)
    original = original.model_copy(update={"session_id": "s1", "tool_use_result": {"stdout": "x"}})
    result, _ = pair([user("go"), assistant(tu("t1")), original])
    patched = result[2]
    assert isinstance(patched, UserMessage)
    assert (patched.uuid, patched.is_meta, patched.session_id) == (original.uuid, True, "s1")
    assert patched.tool_use_result == {"stdout": "x"}
    assert render([patched]) == ["U(meta)[ph t1, text x]"]


def test_r4_28_orphan_only_next_user_without_tool_uses() -> None:
    """R4.27/R4.28: an assistant without tool_use followed by results → they are orphans."""
    result, report = pair([user("go"), assistant("plain"), user(tr("t1"), TextBlock(text="keep"))])
    assert render(result) == ["U'go'", "A[text plain]", "U[text keep]"]
    assert report.placeholders_inserted == ()


def test_r4_28_malformed_result_in_next_user_is_orphaned() -> None:
    malformed = UnknownBlock(type="tool_result", content="no id")
    result, report = pair([user("go"), assistant(tu("t1")), user(tr("t1"), malformed)])
    assert render(result) == ["U'go'", "A[t1]", "U[tr t1]"]
    assert report.orphan_results_dropped == (PairingFix(tool_use_id=None, message_index=2),)


def test_r4_29_next_is_assistant_gets_meta_user_in_between() -> None:
    result, report = pair([user("go"), assistant(tu("t1"), tu("t2")), assistant("next")])
    assert render(result) == ["U'go'", "A[t1, t2]", "U(meta)[ph t1, ph t2]", "A[text next]"]
    assert report.inserted_messages == (2,)


def test_r4_29_no_tool_use_no_insertion() -> None:
    messages: list[ApiMessage] = [user("go"), assistant("a"), assistant("b")]
    result, report = pair(messages)
    assert result == messages
    assert not report.repaired


def test_r4_29_inserted_messages_use_injected_clock_and_ids() -> None:
    result, _ = pair([user("go"), assistant(tu("t1")), assistant(tu("t2"))])
    assert [(m.uuid, m.timestamp) for m in result if m.is_meta] == [
        ("00000000-0000-4000-8000-000000000001", "2026-01-01T00:00:00.000Z"),
        ("00000000-0000-4000-8000-000000000002", "2026-01-01T00:00:00.001Z"),
    ]


def test_r4_30_strict_mode_raises_with_report() -> None:
    with pytest.raises(PairingRepairRequired) as raised:
        pair([user("go"), assistant(tu("t1"))], strict=True)
    assert isinstance(raised.value, AgentbusError)
    assert raised.value.report.placeholders_inserted == (PairingFix(tool_use_id="t1", message_index=1),)
    assert "t1@1" in str(raised.value)


def test_r4_30_strict_mode_passes_clean_history() -> None:
    messages: list[ApiMessage] = [user("go"), assistant(tu("t1")), user(tr("t1"))]
    result, report = pair(messages, strict=True)
    assert result == messages
    assert not report.repaired


def test_r4_30_strict_mode_refuses_leading_orphan_strip() -> None:
    with pytest.raises(PairingRepairRequired) as raised:
        pair([user(tr("t9")), assistant("a")], strict=True)
    assert raised.value.report.orphan_results_dropped == (PairingFix(tool_use_id="t9", message_index=0),)


def test_string_content_assistant_is_left_as_is() -> None:
    legacy = AssistantMessage(
        message=AssistantPayload(id="m", model="x", content="old string reply"), uuid="a1", timestamp="t"
    )
    result, report = pair([user("go"), legacy, user("next")])
    assert result[1] is legacy
    assert not report.repaired


def test_report_is_frozen() -> None:
    report = PairingReport()
    with pytest.raises(ValueError, match="frozen"):
        report.dropped_messages = (1,)  # type: ignore[misc]


# --- queries --------------------------------------------------------------------------------------


def test_tool_use_ids_lists_client_tool_uses_only() -> None:
    server = ServerToolUseBlock(type="server_tool_use", id="srv", name="web_search", input={})
    assert tool_use_ids(assistant("x", tu("t1"), server, tu("t2"))) == ["t1", "t2"]
    assert tool_use_ids(user(tr("t1"))) == []
    assert tool_result_ids(user(tr("t1"), TextBlock(text="x"), tr("t2"))) == ["t1", "t2"]
    assert tool_result_ids(user("text")) == []


def test_unpaired_tool_use_ids_looks_anywhere_later() -> None:
    messages: list[ApiMessage] = [
        user("go"),
        assistant(tu("t1"), tu("t2")),
        user("interjection"),
        user(tr("t2")),
        assistant(tu("t3")),
        user(tr("t1")),
        assistant(tu("t4"), tu("t5")),
    ]
    assert unpaired_tool_use_ids(messages) == ["t3", "t4", "t5"]


def test_unpaired_tool_use_ids_result_before_use_does_not_count() -> None:
    assert unpaired_tool_use_ids([user(tr("t1")), assistant(tu("t1"))]) == ["t1"]
