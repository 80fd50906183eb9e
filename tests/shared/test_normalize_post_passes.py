"""Post-passes of normalizeMessagesForAPI, in order (R4.13–R4.21)."""

from __future__ import annotations

import pytest

from agentbus_redis.errors import ImageSizeError
from agentbus_redis.messages.content import RedactedThinkingBlock, TextBlock, ToolResultBlock
from agentbus_redis.messages.factories import derive_short_message_id
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage
from agentbus_redis.normalize import NormalizeOptions, RepairKind, normalize_messages_for_api
from agentbus_redis.normalize.passes.post_passes import (
    relocate_tool_reference_siblings,
    smoosh_system_reminder_siblings,
)
from tests.shared.normalize_builders import (
    assistant,
    image,
    shape,
    text,
    thinking,
    tool_reference,
    tool_result,
    tool_use,
    user,
    wire,
)


def _normalize(
    messages: list[Message], options: NormalizeOptions | None = None
) -> list[UserMessage | AssistantMessage]:
    return normalize_messages_for_api(messages, options=options or NormalizeOptions())[0]


def test_r4_13_relocate_tool_reference_siblings_gated() -> None:
    """R4.13 (gate ON): texts next to a tool_reference move to the end of the next user message with a
    tool_result and no tool_reference; with no such message they stay."""
    source = user([tool_result("t1", [tool_reference("Grep")]), text("<system-reminder>\nmem\n</system-reminder>")])
    target = user([tool_result("t2", "out")])
    moved = relocate_tool_reference_siblings([source, assistant(tool_use("t2")), target])
    assert shape(moved) == ["U[tool_result]", "A[tool_use]", "U[tool_result,text]"]
    assert relocate_tool_reference_siblings([source]) == [source]
    options = NormalizeOptions(tool_search_enabled=True, toolref_defer=True)
    result = _normalize([assistant(tool_use("t1")), source, assistant(tool_use("t2")), target], options)
    assert shape(result) == ["A[tool_use]", "U[tool_result]", "A[tool_use]", "U[tool_result,text]"]


def test_r4_14_orphaned_thinking_only_dropped() -> None:
    """R4.14: a thinking-only assistant is dropped unless another assistant with its message.id has
    non-thinking content (then R4.7 merges them). Unlike R4.16 it does not merge the users it leaves
    adjacent (Claude Code's behaviour; the safety finalizer merges them later)."""
    orphan = assistant(thinking("lost"), RedactedThinkingBlock(data="xx"), msg_id="A")
    result, report = normalize_messages_for_api([user("q"), orphan, user("again")], options=NormalizeOptions())
    assert shape(result) == ["U[text]", "U[text]"]
    assert report.count(RepairKind.ORPHANED_THINKING_DROPPED) == 1
    partner_later: list[Message] = [
        user("q"),
        assistant(thinking("t"), msg_id="B"),
        user([text("x")]),
        assistant(text("ans"), msg_id="B"),
    ]
    assert shape(_normalize(partner_later)) == ["U[text]", "A[thinking]", "U[text]", "A[text]"]


def test_r4_15_trailing_thinking_removed_from_last_assistant() -> None:
    """R4.15: only the final assistant loses its trailing thinking run; all-thinking →
    ``[No message content]`` (with ``citations: []``)."""
    last = assistant(text("answer"), thinking("a"), thinking("b"), msg_id="L")
    result, report = normalize_messages_for_api([user("q"), last], options=NormalizeOptions())
    assert wire(result[-1]) == [{"type": "text", "text": "answer"}]
    assert report.count(RepairKind.TRAILING_THINKING_DROPPED) == 1
    thinking_then_tool = assistant(thinking("a"), tool_use("t1"), thinking("b"), msg_id="M")
    assert shape(_normalize([user("q"), thinking_then_tool])) == ["U[text]", "A[thinking,tool_use]"]
    only: list[Message] = [user("q"), assistant(text("x"), msg_id="T"), assistant(thinking("z"), msg_id="T")]
    assert wire(_normalize(only)[-1]) == [{"type": "text", "text": "x"}]


def test_r4_15_all_thinking_final_becomes_placeholder() -> None:
    """R4.15: a final assistant of thinking only that survived R4.14 (same id has text elsewhere) →
    ``[No message content]``."""
    messages: list[Message] = [
        user("q"),
        assistant(text("first"), msg_id="Z"),
        user("more"),
        assistant(thinking("t"), msg_id="Z"),
    ]
    result = _normalize(messages)
    assert wire(result[-1]) == [{"type": "text", "text": "[No message content]", "citations": []}]


def test_r4_16_whitespace_only_assistants_removed_and_users_merged() -> None:
    """R4.16: an assistant of only blank text goes; the now-adjacent users merge (R4.10). Runs after
    R4.15: ``[text "\\n\\n", thinking]`` as last message becomes blank-only and is removed."""
    messages: list[Message] = [user("a"), assistant(text("\n\n"), text(" \t"), msg_id="W"), user("b")]
    result, report = normalize_messages_for_api(messages, options=NormalizeOptions())
    assert wire(result[0]) == [{"type": "text", "text": "a\n"}, {"type": "text", "text": "b"}]
    assert report.count(RepairKind.WHITESPACE_ASSISTANT_DROPPED) == 1
    with_thinking: list[Message] = [user("a"), assistant(text("\n\n"), thinking("x"), msg_id="W2"), user("b")]
    assert shape(_normalize(with_thinking)) == ["U[text]", "A[text,thinking]", "U[text]"]
    last_blank: list[Message] = [user("a"), assistant(text("  "), thinking("x"), msg_id="V")]
    assert shape(_normalize(last_blank)) == ["U[text]"]


def test_r4_17_empty_assistant_gets_no_content_unless_last() -> None:
    """R4.17: a non-final ``[]`` assistant gets ``(no content)``; the final one may stay empty (prefill)."""
    result, report = normalize_messages_for_api(
        [user("a"), assistant(msg_id="E1"), user("b"), assistant(msg_id="E2")], options=NormalizeOptions()
    )
    assert wire(result[1]) == [{"type": "text", "text": "(no content)", "citations": []}]
    assert result[-1].blocks == []
    assert report.count(RepairKind.EMPTY_ASSISTANT_FILLED) == 1


def test_r4_18_system_reminder_siblings_folded_gated() -> None:
    """R4.18 (gate ON): adjacent users merge, then ``<system-reminder>`` texts fold into the LAST
    tool_result; other texts stay siblings."""
    messages: list[Message] = [
        assistant(tool_use("t1"), tool_use("t2"), msg_id="A"),
        user([tool_result("t1", "one"), tool_result("t2", "two")]),
        user([text("<system-reminder>\nnote\n</system-reminder>"), text("real input")]),
    ]
    result = _normalize(messages, NormalizeOptions(chair_sermon=True))
    assert wire(result[1]) == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "one"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "two\n\n<system-reminder>\nnote\n</system-reminder>"},
        {"type": "text", "text": "real input"},
    ]
    ungated = _normalize(messages)
    assert shape(ungated) == ["A[tool_use,tool_use]", "U[tool_result,tool_result,text,text]"]
    with_ref = user([tool_result("t1", [tool_reference("X")]), text("<system-reminder>\nx\n</system-reminder>")])
    assert smoosh_system_reminder_siblings([with_ref]) == [with_ref]


def test_r4_19_error_tool_result_non_text_removed() -> None:
    """R4.19: an is_error tool_result with non-text items keeps only its texts, joined by a blank line,
    as one text block (``[]`` when there is none); non-error results are untouched."""
    messages: list[Message] = [
        assistant(tool_use("t1"), tool_use("t2"), tool_use("t3"), msg_id="A"),
        user(
            [
                tool_result("t1", [text("bad"), image(), text("input")], is_error=True),
                tool_result("t2", [image()], is_error=True),
                tool_result("t3", [image(), text("fine")]),
            ]
        ),
    ]
    result, report = normalize_messages_for_api(messages, options=NormalizeOptions())
    blocks = [b for b in result[1].blocks if isinstance(b, ToolResultBlock)]
    assert blocks[0].content == [TextBlock(text="bad\n\ninput")]
    assert blocks[1].content == []
    assert isinstance(blocks[2].content, list)
    assert [item.type for item in blocks[2].content] == ["image", "text"]
    assert report.count(RepairKind.ERROR_TOOL_RESULT_SANITIZED) == 2


def test_r4_20_snip_id_tags_gated() -> None:
    """R4.20 (snip): ``\\n[id:<short>]`` after the string or last text of every non-meta user message."""
    prompt = user("hello", uuid="3f2a9c1e-7b4d-4e8a-9f01-23456789abcd")
    blocks = user([text("a"), image(), text("b"), image()])
    meta = user("ctx", is_meta=True)
    result = _normalize([prompt, assistant(text("x")), blocks, assistant(text("y")), meta], NormalizeOptions(snip=True))
    assert result[0].message.content == "hello\n[id:3gmrpp]"
    assert wire(result[2])[2] == {"type": "text", "text": f"b\n[id:{derive_short_message_id(blocks.uuid)}]"}
    assert result[4].message.content == "ctx"
    assert _normalize([prompt])[0].message.content == "hello"


def test_r4_21_oversized_base64_image_raises() -> None:
    """R4.21: a top-level base64 image over the limit in a user message fails the whole call."""
    big = image("A" * 101)
    with pytest.raises(ImageSizeError) as raised:
        _normalize([user([text("see"), image("ok"), big])], NormalizeOptions(max_image_base64_bytes=100))
    assert [(o.image_number, o.size, o.block_index) for o in raised.value.oversized] == [(2, 101, 2)]
    assert raised.value.limit == 100
    # At the limit, or nested in a tool_result, it is not R4.21's concern.
    _normalize([user([image("A" * 100)])], NormalizeOptions(max_image_base64_bytes=100))
    nested: list[Message] = [assistant(tool_use("t1")), user([tool_result("t1", [big])])]
    _normalize(nested, NormalizeOptions(max_image_base64_bytes=100))
