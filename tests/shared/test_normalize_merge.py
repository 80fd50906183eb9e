"""Merging helpers (§4.3): R4.10 mergeUserMessages, R4.11 mergeUserMessagesAndToolResults, R4.12
smooshIntoToolResult."""

from __future__ import annotations

from agentbus_redis.messages.content import TextBlock, ToolResultBlock
from agentbus_redis.normalize import merge_user_messages, merge_user_messages_and_tool_results, smoosh_into_tool_result
from tests.shared.normalize_builders import image, text, tool_reference, tool_result, user, wire


def test_r4_10_seam_rule() -> None:
    """R4.10 example: a=``"2 + 2"``, b=``"3 + 3"`` → ``[text "2 + 2\\n", text "3 + 3"]``."""
    merged = merge_user_messages(user("2 + 2"), user("3 + 3"))
    assert wire(merged) == [{"type": "text", "text": "2 + 2\n"}, {"type": "text", "text": "3 + 3"}]


def test_r4_10_hoist_tool_result_before_text() -> None:
    """R4.10 example: a=``[text "note"]``, b=``[tool_result t1]`` → ``[tool_result t1, text "note"]``."""
    merged = merge_user_messages(user([text("note")]), user([tool_result("t1")]))
    assert [block.type for block in merged.blocks] == ["tool_result", "text"]
    assert wire(merged)[1] == {"type": "text", "text": "note"}


def test_r4_10_hoist_keeps_relative_order() -> None:
    """R4.10 example: a=``[tool_result t1, text x]``, b=``[tool_result t2]`` →
    ``[tool_result t1, tool_result t2, text x]`` (no seam: b starts with a tool_result)."""
    merged = merge_user_messages(user([tool_result("t1"), text("x")]), user([tool_result("t2")]))
    assert wire(merged) == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
        {"type": "tool_result", "tool_use_id": "t2", "content": "ok"},
        {"type": "text", "text": "x"},
    ]


def test_r4_10_uuid_and_fields_rule() -> None:
    """R4.10: the result keeps a's fields; uuid = b's when a is meta, else a's."""
    meta, real = user("ctx", is_meta=True), user("hi")
    merged = merge_user_messages(meta, real)
    assert merged.uuid == real.uuid
    assert merged.is_meta is True
    merged_back = merge_user_messages(real, meta)
    assert merged_back.uuid == real.uuid
    assert merged_back.is_meta is None


def test_r4_10_snip_meta_only_when_both_meta() -> None:
    """R4.10 (snip feature): the merged message is meta only if both were."""
    assert merge_user_messages(user("a", is_meta=True), user("b"), snip=True).is_meta is None
    assert merge_user_messages(user("a", is_meta=True), user("b", is_meta=True), snip=True).is_meta is True


def test_r4_11_legacy_fold_example() -> None:
    """R4.11 example (legacy): a=``[tool_result(t1,"ok")]``, b=``[text "<system-reminder>\\nX\\n</system-reminder>"]``
    → ``[tool_result(t1, "ok\\n\\n<system-reminder>\\nX\\n</system-reminder>")]``; uuid stays a's, no seam."""
    a = user([tool_result("t1", "ok")])
    b = user([text("<system-reminder>\nX\n</system-reminder>")], is_meta=True)
    merged = merge_user_messages_and_tool_results(a, b)
    assert wire(merged) == [
        {"type": "tool_result", "tool_use_id": "t1", "content": "ok\n\n<system-reminder>\nX\n</system-reminder>"}
    ]
    assert merged.uuid == a.uuid


def test_r4_11_plain_concatenation_without_trailing_result() -> None:
    """R4.11: when a does not end with a tool_result the blocks are concatenated (no seam ``\\n``)."""
    merged = merge_user_messages_and_tool_results(user([text("a")]), user("b"))
    assert wire(merged) == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]


def test_r4_11_legacy_needs_string_result_and_all_text() -> None:
    """R4.11 (gate OFF): an array-content result, or a non-text incoming block, means concatenation."""
    array_result = user([tool_result("t1", [text("out")])])
    merged = merge_user_messages_and_tool_results(array_result, user([text("note")]))
    assert [block.type for block in merged.blocks] == ["tool_result", "text"]
    with_image = merge_user_messages_and_tool_results(user([tool_result("t1", "ok")]), user([text("n"), image()]))
    assert [block.type for block in with_image.blocks] == ["tool_result", "text", "image"]


def test_r4_11_universal_smoosh_gated() -> None:
    """R4.11 (gate ``tengu_chair_sermon`` ON): every non-tool_result block of b folds into a's last
    tool_result; b's own tool_results follow as siblings (then hoisted)."""
    a = user([tool_result("t1", "ok")])
    b = user([text("note"), image(), tool_result("t2", "two")])
    merged = merge_user_messages_and_tool_results(a, b, chair_sermon=True)
    assert [block.type for block in merged.blocks] == ["tool_result", "tool_result"]
    folded = merged.blocks[0]
    assert isinstance(folded, ToolResultBlock)
    assert isinstance(folded.content, list)
    assert [item.type for item in folded.content] == ["text", "image"]
    assert folded.content[0] == TextBlock(text="ok\n\nnote")


def test_r4_11_universal_smoosh_falls_back_with_tool_reference() -> None:
    """R4.11/R4.12: a tool_result holding a tool_reference cannot take siblings → concatenation."""
    a = user([tool_result("t1", [tool_reference("Grep")])])
    merged = merge_user_messages_and_tool_results(a, user([text("note")]), chair_sermon=True)
    assert [block.type for block in merged.blocks] == ["tool_result", "text"]


def test_r4_12_string_result_joined_trimmed_empties_dropped() -> None:
    """R4.12: string/absent content + only text → one string, trimmed parts joined by a blank line."""
    folded = smoosh_into_tool_result(tool_result("t1", "  out \n"), [text(" a "), text("   "), text("b")])
    assert folded is not None
    assert folded.content == "out\n\na\n\nb"
    absent = smoosh_into_tool_result(tool_result("t1", None), [text("x")])
    assert absent is not None
    assert absent.content == "x"


def test_r4_12_error_result_takes_only_text() -> None:
    """R4.12: an is_error result only takes text blocks; with nothing left it is unchanged."""
    error = tool_result("t1", "boom", is_error=True)
    assert smoosh_into_tool_result(error, [image()]) == error
    folded = smoosh_into_tool_result(error, [image(), text("why")])
    assert folded is not None
    assert folded.content == "boom\n\nwhy"


def test_r4_12_array_result_merges_adjacent_text() -> None:
    """R4.12: array result: existing + incoming, adjacent texts merged with a blank line, empty texts
    removed, images passed through; a tool_reference makes folding impossible."""
    result = tool_result("t1", [text("a"), image()])
    folded = smoosh_into_tool_result(result, [text(" "), image(), text("b"), text("c")])
    assert folded is not None
    assert folded.content == [text("a"), image(), image(), text("b\n\nc")]
    assert smoosh_into_tool_result(tool_result("t1", [tool_reference("X")]), [text("b")]) is None
    assert smoosh_into_tool_result(result, []) == result
