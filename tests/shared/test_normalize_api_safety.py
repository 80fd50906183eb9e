"""The API safety finalizer (beyond Claude Code): each pass, and that its output satisfies the
validator (anthropic-api-rules.md §3)."""

from __future__ import annotations

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ContentBlock, ToolResultBlock, ToolUseBlock, UnknownBlock
from agentbus_redis.messages.kinds import ApiMessage
from agentbus_redis.normalize import NormalizeOptions, RepairKind, make_api_safe, to_messages_request, validate_request
from agentbus_redis.normalize.safety.block_safety import drop_blank_text_blocks, drop_malformed_and_unsupported_blocks
from agentbus_redis.normalize.safety.tool_ids import VALID_TOOL_ID, rewrite_invalid_tool_ids, tool_id_mapping
from agentbus_redis.normalize.thinking_replay import drop_unreplayable_thinking, same_model
from tests.shared.normalize_builders import (
    assistant,
    image,
    server_result,
    server_use,
    shape,
    text,
    thinking,
    tool_result,
    tool_use,
    user,
    wire,
)


def _safe(messages: list[ApiMessage], **options: object) -> tuple[list[ApiMessage], list[RepairKind]]:
    normalize_options = NormalizeOptions.model_validate(options)
    result, repairs = make_api_safe(messages, options=normalize_options, clock=FixedClock(), ids=SequentialIds(7000))
    # Validated in the thinking mode the options name (None: the sender fits thinking, mode rules skipped).
    request = to_messages_request(result)
    assert validate_request(request, options=normalize_options, allow_prefill=True) == []
    return result, [repair.kind for repair in repairs]


def test_api_1_8_blank_text_dropped_claude_code_62396() -> None:
    """API §1.8 / claude-code#62396: a resumed tool_use-only assistant carrying an extra
    ``{"type":"text","text":""}`` loses it; whitespace-only texts go too, also inside tool_results."""
    a = assistant(tool_use("t1"), text(""))
    results = user([tool_result("t1", [text("  "), text("out")]), text("\n")])
    result, kinds = _safe([user("q"), a, results, assistant(text("done"))])
    assert wire(result[1]) == [{"type": "tool_use", "id": "t1", "name": "Bash", "input": {}}]
    assert wire(result[2]) == [
        {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "out"}]}
    ]
    assert kinds.count(RepairKind.BLANK_TEXT_DROPPED) == 3


def test_api_1_7_blank_user_string_becomes_no_content() -> None:
    """API §1.7/§1.8: a whitespace-only string content is empty; the user message gets ``(no content)``."""
    result, kinds = _safe([user("   "), assistant(text("hi"))])
    assert wire(result[0]) == [{"type": "text", "text": "(no content)"}]
    assert kinds == [RepairKind.BLANK_TEXT_DROPPED, RepairKind.EMPTY_USER_FILLED]


def test_api_1_7_emptied_assistant_dropped_and_neighbours_merged() -> None:
    """API §1.7/§1.5: an assistant left empty is dropped (not the last one: prefill) and the users it
    separated merge (R4.10 semantics)."""
    result, kinds = _safe([user("a"), assistant(text(" ")), user("b"), assistant()])
    assert shape(result) == ["U[text,text]", "A[]"]
    assert RepairKind.EMPTY_ASSISTANT_DROPPED in kinds
    assert RepairKind.USER_MESSAGES_MERGED in kinds


def test_api_1_malformed_and_unsupported_blocks_dropped() -> None:
    """API §1: malformed blocks (a tool_use without id) and block types the role may not carry
    (unknown ``fallback``, a tool_result in an assistant, a tool_use in a user message, a
    ``tool_use`` inside tool_result content) are removed; ``extra_block_types`` admits more."""
    fallback = UnknownBlock.model_validate({"type": "fallback", "from": {"model": "a"}})
    no_id = UnknownBlock.model_validate({"type": "tool_use", "name": "Bash", "input": {}})
    odd_result = tool_result("t9", [text("x"), UnknownBlock.model_validate({"type": "tool_use", "id": "z"})])
    messages: list[ApiMessage] = [
        user([text("q"), tool_use("u1")]),
        assistant(text("hi"), fallback, no_id, tool_result("tX")),
        user([text("next")]),
        assistant(tool_use("t9")),
        user([odd_result]),
    ]
    result, repairs = drop_malformed_and_unsupported_blocks(messages)
    assert shape(result) == ["U[text]", "A[text]", "U[text]", "A[tool_use]", "U[tool_result]"]
    assert [r.kind for r in repairs] == [
        RepairKind.UNSUPPORTED_BLOCK_DROPPED,
        RepairKind.UNSUPPORTED_BLOCK_DROPPED,
        RepairKind.MALFORMED_BLOCK_DROPPED,
        RepairKind.UNSUPPORTED_BLOCK_DROPPED,
        RepairKind.UNSUPPORTED_BLOCK_DROPPED,
    ]
    kept, _ = drop_malformed_and_unsupported_blocks(messages[1:2], extra_block_types=frozenset({"fallback"}))
    assert shape(kept) == ["A[text,fallback]"]


def test_api_1_tool_use_input_coerced_to_object() -> None:
    """API §1 shape / R9.7: a tool_use input that is not an object becomes the object its JSON string
    holds, else ``{}``; the block stays, so its result keeps its partner."""
    a = assistant(tool_use("t1", tool_input='{"command": "ls"}'), tool_use("t2", tool_input=[1, 2]))
    result, kinds = _safe([user("q"), a, user([tool_result("t1"), tool_result("t2")])])
    assert [b.input for b in result[1].blocks if isinstance(b, ToolUseBlock)] == [{"command": "ls"}, {}]
    assert kinds == [RepairKind.TOOL_INPUT_COERCED] * 2


def test_api_1_2_server_tool_duplicates_and_orphan_results() -> None:
    """API §1.2/§1.4: a server call id already used earlier is dropped with its result; a server
    result without its call before it in the same message is dropped."""
    first = assistant(server_use("srvtoolu_1"), server_result("srvtoolu_1"), text("a"))
    repeat = assistant(server_use("srvtoolu_1"), server_result("srvtoolu_1"), text("b"))
    orphan = assistant(server_result("srvtoolu_9"), text("c"))
    result, kinds = _safe([user("q"), first, user("r"), repeat, user("s"), orphan, user("t")])
    assert shape(result)[1::2] == ["A[server_tool_use,web_search_tool_result,text]", "A[text]", "A[text]"]
    assert kinds == [
        RepairKind.DUPLICATE_TOOL_USE_DROPPED,
        RepairKind.ORPHAN_TOOL_RESULT_DROPPED,
        RepairKind.ORPHAN_TOOL_RESULT_DROPPED,
    ]


def test_api_1_10_unsigned_and_placeholder_thinking_never_replayed() -> None:
    """API §1.10: thinking without a signature (aborted stream), with an empty one, or with an
    exporter's ``[REDACTED_SIGNATURE]`` is dropped; signed thinking is kept byte-identical and in order."""
    signed_a, signed_b = thinking("first", "sigA"), thinking("second", "sigB")
    messages: list[ApiMessage] = [
        user("q"),
        assistant(thinking("x", None), thinking("y", ""), text("mid")),
        user("again"),
        assistant(thinking("z", "[REDACTED_SIGNATURE]"), signed_a, signed_b, tool_use("t1")),
        user([tool_result("t1")]),
    ]
    result, repairs = drop_unreplayable_thinking(messages)
    assert [r.detail for r in repairs] == ["unsigned", "unsigned", "placeholder signature"]
    assert wire(result[3])[:2] == [signed_a.to_wire(), signed_b.to_wire()]
    assert result[3].blocks[0] is signed_a


def test_api_1_10_thinking_of_another_model_dropped() -> None:
    """API §1.10: thinking produced by another model than the target is not replayed; a dated
    snapshot of the same model counts as the same model."""
    mine = assistant(thinking("t", "s1"), text("a"), model="claude-sonnet-4-5-20250929")
    theirs = assistant(thinking("t", "s2"), text("b"), model="claude-opus-4-1")
    messages: list[ApiMessage] = [user("q"), mine, user("r"), theirs, user("s")]
    result, repairs = drop_unreplayable_thinking(messages, target_model="claude-sonnet-4-5")
    assert shape(result)[1::2] == ["A[thinking,text]", "A[text]"]
    assert "from model claude-opus-4-1" in repairs[0].detail
    assert same_model("claude-x@20250101", "claude-x")
    assert not same_model("claude-opus-4", "claude-opus-4-1")


def test_api_1_10_thinking_disabled_open_turn() -> None:
    """API §1.10: unless thinking is enabled, the open assistant turn (after the last new prompt) may
    not carry thinking; earlier turns keep theirs."""
    earlier = assistant(thinking("old", "s0"), text("done"))
    open_turn = assistant(thinking("now", "s1"), tool_use("t1"))
    messages: list[ApiMessage] = [user("q"), earlier, user("next"), open_turn, user([tool_result("t1")])]
    result, kinds = _safe(messages)
    assert shape(result) == ["U[text]", "A[thinking,text]", "U[text]", "A[tool_use]", "U[tool_result]"]
    assert kinds == [RepairKind.THINKING_DROPPED]
    enabled, enabled_kinds = _safe(messages, thinking_enabled=True)
    assert shape(enabled)[3] == "A[thinking,tool_use]"
    assert enabled_kinds == []
    # The normalization worker's mode: the sender (build_model_params) fits thinking to the open turn, so the
    # open turn keeps its signed thinking, byte-identical ("must remain as they were in the original response").
    for_sender, sender_kinds = _safe(messages, thinking_enabled=None)
    assert [wire(m) for m in for_sender] == [wire(m) for m in messages]
    assert sender_kinds == []


def test_api_1_11_tool_ids_rewritten_consistently() -> None:
    """API §1.11: ids outside ``^[a-zA-Z0-9_-]{1,64}$`` are rewritten on tool_use and tool_result alike,
    deterministically and without colliding with any other id of the request."""
    bad, long_id = "functions.write_todos:0", "x" * 80
    messages: list[ApiMessage] = [
        user("q"),
        assistant(tool_use(bad), tool_use("functions_write_todos_0"), tool_use(long_id), tool_use("")),
        user([tool_result(bad), tool_result("functions_write_todos_0"), tool_result(long_id), tool_result("")]),
    ]
    result, kinds = _safe(messages)
    uses = [b.id for b in result[1].blocks if isinstance(b, ToolUseBlock)]
    results = [b.tool_use_id for b in result[2].blocks if isinstance(b, ToolResultBlock)]
    assert uses == results
    assert all(VALID_TOOL_ID.match(tool_id) for tool_id in uses)
    assert len(set(uses)) == 4
    assert uses[1] == "functions_write_todos_0"  # valid ids are never touched
    assert uses[2] == "x" * 64
    assert kinds.count(RepairKind.TOOL_ID_REWRITTEN) == 6
    assert tool_id_mapping(messages) == tool_id_mapping(messages)
    assert rewrite_invalid_tool_ids(messages[:1]) == (messages[:1], [])


def test_api_1_3_tool_results_hoisted_first() -> None:
    """API §1.3: a stored ``[text, tool_result]`` user message is reordered to results first."""
    result, kinds = _safe([user("q"), assistant(tool_use("t1")), user([text("see"), tool_result("t1")])])
    assert shape(result)[2] == "U[tool_result,text]"
    assert kinds == [RepairKind.TOOL_RESULTS_HOISTED]


def test_api_1_5_consecutive_assistants_merged() -> None:
    """API §1.5: consecutive assistants (different message ids) merge into one, content in order."""
    result, kinds = _safe([user("q"), assistant(text("a"), msg_id="m1"), assistant(text("b"), msg_id="m2")])
    assert wire(result[1]) == [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]
    assert kinds == [RepairKind.ASSISTANT_MESSAGES_MERGED]


def test_api_1_6_first_message_is_user() -> None:
    """API §1.6: a request starting with an assistant (or empty) gets a leading meta ``(no content)``."""
    result, kinds = _safe([assistant(text("hello")), user("hi")])
    assert result[0].message.content == "(no content)"
    assert kinds == [RepairKind.LEADING_USER_INSERTED]
    empty, _ = _safe([])
    assert shape(empty) == ["U[text]"]


def test_api_1_9_final_assistant_trailing_whitespace_trimmed() -> None:
    """API §1.9: a final (prefill) assistant's last text loses its trailing whitespace."""
    result, kinds = _safe(
        [
            user("q"),
            assistant(text("Sure, "), tool_use("t1")),
            user([tool_result("t1")]),
            assistant(text("The answer is \n")),
        ]
    )
    assert wire(result[-1]) == [{"type": "text", "text": "The answer is"}]
    assert kinds == [RepairKind.TRAILING_WHITESPACE_TRIMMED]


def test_api_safety_leaves_a_valid_request_untouched() -> None:
    """No repair on a request that is already valid (the passes report nothing)."""
    blocks: list[ContentBlock] = [thinking("t", "sig"), text("a"), tool_use("toolu_1")]
    messages: list[ApiMessage] = [user("q"), assistant(*blocks), user([tool_result("toolu_1"), image()])]
    result, kinds = _safe(messages, thinking_enabled=True)
    assert kinds == []
    assert [wire(m) for m in result] == [wire(m) for m in messages]
    blank_free, repairs = drop_blank_text_blocks(messages)
    assert repairs == []
    assert blank_free == messages
