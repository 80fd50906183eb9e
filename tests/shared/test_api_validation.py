"""validate_api_request: one test per rule of anthropic-api-rules.md (§1.x error catalogue, §3.x consensus)
and Claude Code's API-side invariants (R4.19, R4.21, R4.23), each with a valid and an invalid request.
Request shapes follow the issues the spec cites (claude-code#62396, #18947, #20901, #64383, LangChain's
``functions.write_todos:0`` ids)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic
import pytest

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.api.validation import (
    ApiViolation,
    InvalidApiRequest,
    assert_valid_api_request,
    validate_api_request,
)
from agentbus_redis.errors import AgentbusError
from agentbus_redis.json_types import JsonValue

Block = dict[str, Any]
Message = dict[str, Any]
SIG = "EqQBCkgIARABGAIiQL2x"


def user(*content: Block | str) -> Message:
    return {
        "role": "user",
        "content": content[0] if len(content) == 1 and isinstance(content[0], str) else list(content),
    }


def assistant(*content: Block | str) -> Message:
    return {
        "role": "assistant",
        "content": content[0] if len(content) == 1 and isinstance(content[0], str) else list(content),
    }


def text(value: str) -> Block:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str = "Bash") -> Block:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {"command": "ls"}}


def tool_result(tool_id: str, content: Any = "ok", **extra: Any) -> Block:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def thinking(value: str = "Let me look.", signature: Any = SIG) -> Block:
    return {"type": "thinking", "thinking": value, "signature": signature}


def image(size: int = 8) -> Block:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * size}}


def document() -> Block:
    return {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}}


def check(request: Any, **options: Any) -> list[ApiViolation]:
    return validate_api_request(request, **options)


def rules(request: Any, **options: Any) -> list[str]:
    return [v.rule for v in check(request, **options)]


def only(request: Any, rule: str, **options: Any) -> ApiViolation:
    found = check(request, **options)
    assert [v.rule for v in found] == [rule], found
    return found[0]


TOOL_LOOP = [
    user(text("list files")),
    assistant(thinking(), text("Listing."), tool_use("toolu_1")),
    user(tool_result("toolu_1"), text("<system-reminder>\nx\n</system-reminder>")),
]


def test_valid_tool_loop_has_no_violation() -> None:
    assert check(TOOL_LOOP, thinking_enabled=True) == []
    assert check({"messages": TOOL_LOOP, "thinking": {"type": "enabled", "budget_tokens": 2048}}) == []


# --- envelope and shape -----------------------------------------------------------------------------


def test_s1_envelope_messages_must_be_a_non_empty_list() -> None:
    assert only([], "empty_messages").detail == "messages: at least one message is required"
    assert rules({"messages": "hi"}) == ["invalid_messages"]


def test_s1_envelope_message_shape_and_role() -> None:
    assert only(["not a message"], "invalid_message").detail == "messages.0: Input should be a valid dictionary"
    assert only([{"role": "tool", "content": "hi"}], "invalid_role").detail == (
        "messages.0.role: Input should be 'user', 'assistant' or 'system'"
    )
    assert only([{"role": "user", "content": None}], "invalid_content").message_index == 0
    assert only([{"role": "user"}], "invalid_content").detail.startswith("messages.0.content:")


def test_system_role_messages_follow_todays_api() -> None:
    """anthropic-api-rules.md §1.6 predates them: today's API (anthropic SDK 2.13 ``BetaSystemMessageParam``,
    sent by Claude Code 2.1.332) takes ``role: "system"`` messages between the turns, with ``clear_at`` and a
    per-turn ``output_config``; the client and SDK win. They take no part in the user/assistant rules."""
    system = {"role": "system", "content": "Today's date is 2026-11-27.", "output_config": {"effort": "medium"}}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}
    result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}
    assert check([user(text("go")), system]) == []
    assert (
        check(
            [
                user(text("go")),
                system,
                assistant(tool_use),
                user(result),
                {"role": "system", "content": [], "output_config": {}},
            ]
        )
        == []
    )
    assert check([user(text("go")), {"role": "system", "content": [text("a")], "clear_at": "next_user_message"}]) == []
    assert only([user(text("go")), {"role": "system", "content": []}], "empty_system_message").message_index == 1
    found = rules([user(text("go")), {"role": "system", "content": "x", "clear_at": "later", "name": "n"}])
    assert found == ["invalid_system_message", "invalid_system_message"]
    bad_effort = {"role": "system", "content": "x", "output_config": {"effort": "extreme"}}
    assert rules([user(text("go")), bad_effort]) == ["invalid_system_message"]
    assert rules([user(text("go")), {"role": "system", "content": [{"type": "image"}]}]) == ["invalid_block"]


def test_unknown_block_types_pass_through_but_need_a_string_type() -> None:
    assert check([user(text("hi"), {"type": "future_block", "payload": {"x": 1}})]) == []
    found = only([user(text("hi"), {"payload": 1})], "invalid_block")
    assert (found.message_index, found.block_index) == (0, 1)
    assert rules([user(text("hi"), "raw string block")]) == ["invalid_block"]


def test_known_blocks_need_their_required_fields() -> None:
    request = [user(text("go")), assistant({"type": "tool_use", "name": "Bash", "input": {}})]
    found = only(request, "missing_field", allow_prefill=True)
    assert found.detail == "messages.1.content.0.tool_use.id: Field required"
    found = only([user({"type": "text", "text": 3})], "missing_field")
    assert found.detail == "messages.0.content.0.text.text: Input should be a valid string"
    request = [user(text("go")), assistant({"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": "ls"})]
    fields = [v for v in check(request, allow_prefill=True) if v.rule == "missing_field"]
    assert [v.detail for v in fields] == ["messages.1.content.0.tool_use.input: Input should be a valid dictionary"]


# --- roles and emptiness ----------------------------------------------------------------------------


def test_s1_6_first_message_must_be_user() -> None:
    found = only([assistant("Hello"), user("hi")], "first_message_not_user")
    assert found.detail == 'messages: first message must use the "user" role'
    assert found.message_index == 0


def test_s1_5_roles_must_alternate_because_agentbus_always_merges() -> None:
    found = only([user("a"), user("b")], "roles_not_alternating")
    assert found.message_index == 1
    assert found.detail == (
        'messages: roles must alternate between "user" and "assistant", but found multiple "user" roles in a row'
    )
    assert 'multiple "assistant" roles' in check([user("a"), assistant("b"), assistant("c"), user("d")])[0].detail


def test_s1_7_empty_content_except_final_assistant() -> None:
    found = only([user("")], "empty_content")
    assert found.detail == (
        "messages.0: all messages must have non-empty content except for the optional final assistant message"
    )
    assert only([{"role": "user", "content": []}], "empty_content").message_index == 0
    middle = [user("a"), {"role": "assistant", "content": []}, user("b")]
    assert only(middle, "empty_content").message_index == 1
    assert check([user("a"), {"role": "assistant", "content": []}], allow_prefill=True) == []


def test_s1_9_prefill_rejected_unless_allowed() -> None:
    request = [user("a"), assistant("The answer is")]
    found = only(request, "prefill_not_supported")
    assert found.detail == (
        "This model does not support assistant message prefill. The conversation must end with a user message."
    )
    assert found.message_index == 1
    assert check(request, allow_prefill=True) == []


# --- text ---------------------------------------------------------------------------------------------


def test_s1_8_empty_text_beside_tool_use_claude_code_62396() -> None:
    """Resume serialised a tool_use-only assistant turn with an extra empty text block."""
    request = [user("run it"), assistant(text(""), tool_use("toolu_1")), user(tool_result("toolu_1"))]
    found = only(request, "empty_text")
    assert (found.message_index, found.block_index) == (1, 0)
    assert found.detail == "messages: text content blocks must be non-empty"
    assert check([user("run it"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"))]) == []


def test_s1_8_whitespace_only_text_claude_code_23440() -> None:
    found = only([user(text(" \n\t "))], "whitespace_text")
    assert found.detail == "messages: text content blocks must contain non-whitespace text"
    assert (found.message_index, found.block_index) == (0, 0)
    string_content = only([user("   ")], "whitespace_text")
    assert (string_content.message_index, string_content.block_index) == (0, None)


def test_s1_9_final_assistant_must_not_end_with_whitespace() -> None:
    found = only([user("a"), assistant(text("Sure, "))], "final_assistant_trailing_whitespace", allow_prefill=True)
    assert found.detail == "messages: final assistant content cannot end with trailing whitespace"
    assert rules([user("a"), assistant("Sure,\n")], allow_prefill=True) == ["final_assistant_trailing_whitespace"]
    assert check([user("a"), assistant(text("Sure,  ")), user("b")]) == []


# --- tool pairing -----------------------------------------------------------------------------------


def test_s1_1_tool_use_without_result_lists_every_id() -> None:
    request = [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_2")), user("never mind")]
    found = only(request, "tool_use_without_result")
    assert found.message_index == 1
    assert found.detail == (
        "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1, toolu_2. "
        "Each `tool_use` block must have a corresponding `tool_result` block in the next message."
    )
    partial = [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_2")), user(tool_result("toolu_2"))]
    assert "after: toolu_1. Each" in only(partial, "tool_use_without_result").detail


def test_s1_1_result_must_be_in_the_very_next_user_message() -> None:
    """§1.3: no message between the tool use and its result (the result is then orphaned as well)."""
    request = [
        user("go"),
        assistant(tool_use("toolu_1")),
        user("hi"),
        assistant("hello"),
        user(tool_result("toolu_1")),
    ]
    assert rules(request) == ["tool_use_without_result", "orphan_tool_result"]
    in_flight = [user("go"), assistant(tool_use("toolu_1"))]
    assert rules(in_flight, allow_prefill=True) == ["tool_use_without_result"]


def test_s1_3_tool_results_come_first_in_the_user_message() -> None:
    request = [user("go"), assistant(tool_use("toolu_1")), user(text("note"), tool_result("toolu_1"))]
    found = only(request, "tool_result_not_first")
    assert (found.message_index, found.block_index) == (2, 1)
    assert found.detail == (
        "messages.2: Did not find 1 `tool_result` block(s) at the beginning of this message. Messages following "
        "`tool_use` blocks must begin with a matching number of `tool_result` blocks."
    )
    assert check([user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"), text("note"))]) == []


def test_s1_2_orphan_tool_result_at_messages_0_content_0_claude_code_18947() -> None:
    """History cut between the pair: the request starts with a tool_result."""
    found = only([user(tool_result("toolu_01A"))], "orphan_tool_result")
    assert (found.message_index, found.block_index) == (0, 0)
    assert found.detail == (
        "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_01A. "
        "Each `tool_result` block must have a corresponding `tool_use` block in the previous message."
    )


def test_s1_2_tool_result_answers_only_the_immediately_preceding_assistant() -> None:
    request = [
        user("go"),
        assistant(tool_use("toolu_1")),
        user(tool_result("toolu_1")),
        assistant(tool_use("toolu_2")),
        user(tool_result("toolu_2"), tool_result("toolu_1")),
    ]
    found = only(request, "orphan_tool_result")
    assert (found.message_index, found.block_index) == (4, 1)
    assert found.detail.startswith("messages.4.content.1: unexpected `tool_use_id`")


def test_s1_4_duplicate_tool_use_ids_claude_code_20901() -> None:
    request = [user("go"), assistant(tool_use("toolu_1"), tool_use("toolu_1")), user(tool_result("toolu_1"))]
    found = only(request, "duplicate_tool_use_id")
    assert found.detail == "messages.1.content.1: `tool_use` ids must be unique"


def test_s1_4_tool_use_ids_unique_across_the_whole_request() -> None:
    request = [
        user("go"),
        assistant(tool_use("toolu_1")),
        user(tool_result("toolu_1")),
        assistant(text("again"), tool_use("toolu_1")),
        user(tool_result("toolu_1")),
    ]
    found = only(request, "duplicate_tool_use_id")
    assert (found.message_index, found.block_index) == (3, 1)


def test_s1_4_single_result_per_tool_use() -> None:
    request = [user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"), tool_result("toolu_1", "x"))]
    found = only(request, "duplicate_tool_result")
    assert found.detail == (
        "messages.2.content.1: each tool_use must have a single result. "
        "Found multiple tool_result blocks with id: toolu_1"
    )


@pytest.mark.parametrize("tool_id", ["functions.write_todos:0", "call abc", "", "toolu_ü"])
def test_s1_11_tool_ids_must_match_the_api_pattern(tool_id: str) -> None:
    """LangChain's cross-provider ids (``functions.write_todos:0``) 400 on Anthropic."""
    request = [user("go"), assistant(tool_use(tool_id)), user(tool_result(tool_id))]
    found = check(request)
    assert [v.rule for v in found] == ["invalid_tool_id", "invalid_tool_id"]
    assert found[0].detail == "messages.1.content.0.tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    assert found[1].detail == (
        "messages.2.content.0.tool_result.tool_use_id: String should match pattern '^[a-zA-Z0-9_-]+$'"
    )


@pytest.mark.parametrize("tool_id", ["bash-uOQIdN0O", "functions_Bash_3", "call_9Zx", "toolu_vrtx_01", "a" * 64])
def test_s1_11_valid_non_toolu_ids_are_accepted(tool_id: str) -> None:
    assert check([user("go"), assistant(tool_use(tool_id)), user(tool_result(tool_id))]) == []


def test_s1_11_tool_ids_are_at_most_64_characters() -> None:
    long_id = "a" * 65
    found = check([user("go"), assistant(tool_use(long_id)), user(tool_result(long_id))])
    assert [v.rule for v in found] == ["invalid_tool_id", "invalid_tool_id"]
    assert found[0].detail.endswith("String should have at most 64 characters")


def test_r1_8_blocks_only_in_their_role() -> None:
    assert rules([user(tool_use("toolu_1"))]) == ["tool_use_in_user_message"]
    request = [user("go"), assistant(text("x"), tool_result("toolu_1")), user("y")]
    assert "tool_result_in_assistant_message" in rules(request)
    assert rules([user(thinking(), text("hi"))]) == ["thinking_in_user_message"]
    assert rules([user({"type": "redacted_thinking", "data": "abc"}, text("hi"))]) == ["thinking_in_user_message"]


# --- server tools -----------------------------------------------------------------------------------


def test_s1_2_server_tool_use_needs_no_client_result() -> None:
    """``srvtoolu_`` ids are answered in the same assistant message, never by a user tool_result."""
    request = [
        user("search"),
        assistant(
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {"query": "x"}},
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
            text("Found it."),
        ),
        user("thanks"),
    ]
    assert check(request) == []


def test_s1_2_advisor_tool_result_without_server_tool_use_claude_code_64383() -> None:
    request = [
        user("help"),
        assistant(text("Asking."), {"type": "advisor_tool_result", "tool_use_id": "srvtoolu_9", "content": {}}),
        user("ok"),
    ]
    found = only(request, "orphan_server_tool_result")
    assert found.detail == (
        "messages.1.content.1: unexpected `tool_use_id` found in `advisor_tool_result` blocks: srvtoolu_9. "
        "Each `advisor_tool_result` block must have a corresponding `server_tool_use` block before it."
    )


def test_s1_2_server_result_must_follow_its_call_in_the_same_message() -> None:
    before = [
        user("search"),
        assistant(
            {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []},
            {"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}},
        ),
        user("thanks"),
    ]
    assert rules(before) == ["orphan_server_tool_result"]
    other_message = [
        user("search"),
        assistant({"type": "server_tool_use", "id": "srvtoolu_01", "name": "web_search", "input": {}}, text("…")),
        user("more"),
        assistant({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_01", "content": []}, text("done")),
        user("thanks"),
    ]
    assert rules(other_message) == ["orphan_server_tool_result"]


# --- tool_result content ----------------------------------------------------------------------------


def test_r1_8_tool_result_content_types() -> None:
    allowed = [text("out"), image(), document(), {"type": "tool_reference", "tool_name": "Grep"}]
    assert check([user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1", allowed))]) == []
    bad = [user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1", [tool_use("toolu_2")]))]
    found = only(bad, "invalid_tool_result_content")
    assert found.detail == (
        "messages.2.content.0.tool_result.content.0: `tool_use` blocks are not allowed in `tool_result` content"
    )
    assert rules([user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1", 42))]) == [
        "invalid_tool_result_content"
    ]


def test_r4_19_error_tool_result_contains_only_text() -> None:
    error_with_image = tool_result("toolu_1", [text("failed"), image()], is_error=True)
    found = only([user("go"), assistant(tool_use("toolu_1")), user(error_with_image)], "error_tool_result_not_text")
    assert (found.message_index, found.block_index) == (2, 0)
    text_only = tool_result("toolu_1", [text("failed")], is_error=True)
    assert check([user("go"), assistant(tool_use("toolu_1")), user(text_only)]) == []
    success_with_image = tool_result("toolu_1", [text("shot"), image()], is_error=False)
    assert check([user("go"), assistant(tool_use("toolu_1")), user(success_with_image)]) == []


# --- thinking ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("signature", ["", "  ", "[REDACTED_SIGNATURE]"])
def test_s1_10_thinking_needs_a_real_signature(signature: str) -> None:
    request = [user("go"), assistant(thinking(signature=signature), text("done")), user("next")]
    found = only(request, "unsigned_thinking")
    assert found.detail == "messages.1.content.0: Invalid `signature` in `thinking` block"


def test_s1_10_unsigned_thinking_is_never_replayed_openclaw_84430() -> None:
    block = {"type": "thinking", "thinking": "partial thought"}
    found = only([user("go"), assistant(block, text("done")), user("next")], "unsigned_thinking")
    assert found.detail == "messages.1.content.0.thinking.signature: Field required"


def test_s1_10_redacted_thinking_needs_data() -> None:
    assert check([user("go"), assistant({"type": "redacted_thinking", "data": "EmwKAhgB"}, text("x")), user("y")]) == []
    found = only(
        [user("go"), assistant({"type": "redacted_thinking"}, text("x")), user("y")], "redacted_thinking_without_data"
    )
    assert found.detail == "messages.1.content.0.redacted_thinking.data: Field required"
    assert rules([user("go"), assistant({"type": "redacted_thinking", "data": ""}, text("x")), user("y")]) == [
        "redacted_thinking_without_data"
    ]


def test_s1_10_thinking_enabled_final_turn_must_start_with_thinking() -> None:
    request = [user("go"), assistant(tool_use("toolu_1")), user(tool_result("toolu_1"))]
    found = only(request, "missing_leading_thinking", thinking_enabled=True)
    assert (found.message_index, found.block_index) == (1, 0)
    assert found.detail == (
        "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. When "
        "`thinking` is enabled, a final `assistant` message must start with a thinking block (preceeding the "
        "lastmost set of `tool_use` and `tool_result` blocks). We recommend you include thinking blocks from "
        "previous turns. To avoid this requirement, disable `thinking`. Please consult our documentation at "
        "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"
    )
    text_first = [user("go"), assistant(text("Let me"), tool_use("toolu_1")), user(tool_result("toolu_1"))]
    assert "but found `text`" in only(text_first, "missing_leading_thinking", thinking_enabled=True).detail
    body = {"messages": request, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    assert rules(body) == ["missing_leading_thinking"]
    assert check(request) == []  # thinking mode unknown for a bare message list
    assert check({"messages": request, "thinking": {"type": "adaptive"}}) == []


def test_s1_10_tool_loop_is_one_turn_only_its_first_message_needs_thinking() -> None:
    """Without interleaved thinking, later responses of a tool loop carry no thinking block."""
    request = [
        user("go"),
        assistant(thinking(), tool_use("toolu_1")),
        user(tool_result("toolu_1")),
        assistant(tool_use("toolu_2")),
        user(tool_result("toolu_2")),
    ]
    assert check(request, thinking_enabled=True) == []
    request[1] = assistant(tool_use("toolu_1"))
    assert only(request, "missing_leading_thinking", thinking_enabled=True).message_index == 1


def test_s1_10_closed_turns_need_no_thinking() -> None:
    request = [
        user("go"),
        assistant(tool_use("toolu_1")),
        user(tool_result("toolu_1")),
        assistant("done"),
        user("next"),
    ]
    assert check(request, thinking_enabled=True) == []


def test_s1_10_thinking_disabled_final_turn_has_no_thinking() -> None:
    request = [user("go"), assistant(thinking(), tool_use("toolu_1")), user(tool_result("toolu_1"))]
    found = only(request, "thinking_while_disabled", thinking_enabled=False)
    assert found.detail == (
        "messages.1.content.0: When thinking is disabled, an `assistant` message in the final position cannot "
        "contain `thinking`. To use thinking blocks, enable `thinking` in your request."
    )
    assert rules({"messages": request}) == ["thinking_while_disabled"]
    finished = [*request, assistant("done"), user("next")]
    assert check(finished, thinking_enabled=False) == []


def _raw_api_messages(path: Path) -> list[dict[str, Any]]:
    """The ``message`` objects of a transcript's user/assistant lines, unnormalized, in file order."""
    found = []
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line) if line.strip() else None
        if (
            isinstance(entry, dict)
            and entry.get("type") in ("user", "assistant")
            and isinstance(entry.get("message"), dict)
        ):
            found.append({"role": entry["message"].get("role"), "content": entry["message"].get("content")})
    return found


def test_s1_10_corpus_redacted_signatures_are_flagged(corpus_root: Path) -> None:
    """marot__spotter transcripts carry ``[REDACTED_SIGNATURE]``: replaying them as thinking must be caught."""
    path = corpus_root / "claude-code" / "marot__spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
    messages = _raw_api_messages(path)
    flagged = [v for v in check(messages) if v.rule == "unsigned_thinking"]
    placeholders = sum(
        1
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("signature") == "[REDACTED_SIGNATURE]"
    )
    assert placeholders > 0
    assert len(flagged) == placeholders


def test_every_corpus_transcript_is_read_without_crashing(corpus_root: Path) -> None:
    """Raw (unnormalized) histories break many rules; the validator reports them, it never raises."""
    for path in sorted((corpus_root / "claude-code").rglob("*.jsonl")):
        for found in check(_raw_api_messages(path)):
            assert found.detail


# --- media --------------------------------------------------------------------------------------------


def test_r4_21_base64_image_at_most_5_mib() -> None:
    limit = 5 * 1024 * 1024
    assert check([user(image(limit), text("what is this?"))]) == []
    found = only([user(image(limit + 1), text("what is this?"))], "image_too_large")
    assert found.detail == (
        f"messages.0.content.0.image.source.base64: image exceeds 5 MB maximum: {limit + 1} bytes > {limit} bytes"
    )
    nested = [
        user("go"),
        assistant(tool_use("toolu_1")),
        user(tool_result("toolu_1", [text("shot"), image(limit + 1)])),
    ]
    found = only(nested, "image_too_large")
    assert found.detail.startswith("messages.2.content.0.tool_result.content.1.image.source.base64: image exceeds")
    assert (found.message_index, found.block_index) == (2, 0)


def test_r4_23_at_most_100_images_and_documents() -> None:
    nested = tool_result("toolu_1", [image() for _ in range(40)])
    at_limit = [
        user(*[image() for _ in range(59)], document(), text("look")),
        assistant(tool_use("toolu_1")),
        user(nested),
    ]
    assert check(at_limit) == []
    over = [
        user(*[image() for _ in range(59)], document(), text("look")),
        assistant(tool_use("toolu_1")),
        user(nested, image()),
    ]
    found = only(over, "too_many_media")
    assert found.detail == "too many images and documents: 100 + 1 > 100"
    assert (found.message_index, found.block_index) == (2, 1)


# --- request level ------------------------------------------------------------------------------------


def test_s1_4_tool_names_must_be_unique() -> None:
    schema = {"type": "object", "properties": {}}
    tools = [{"name": "Bash", "input_schema": schema}, {"name": "Bash", "input_schema": schema}]
    body = {"messages": TOOL_LOOP, "tools": tools, "thinking": {"type": "enabled", "budget_tokens": 2048}}
    found = only(body, "duplicate_tool_name")
    assert (found.message_index, found.detail) == (None, "tools: Tool names must be unique.")


def test_violations_sorted_by_message_then_block() -> None:
    request = [
        user(tool_result("toolu_0")),
        assistant(text(""), tool_use("functions.x:0"), tool_use("toolu_2")),
        user(text("note"), tool_result("toolu_2")),
        user("again"),
    ]
    found = check(request)
    locations = [(v.message_index, v.block_index) for v in found]
    assert locations == sorted(locations, key=lambda loc: (loc[0] or -1, -1 if loc[1] is None else loc[1]))
    assert {v.rule for v in found} >= {
        "orphan_tool_result",
        "empty_text",
        "invalid_tool_id",
        "tool_use_without_result",
        "tool_result_not_first",
        "roles_not_alternating",
    }


def test_assert_valid_api_request_raises_with_every_violation() -> None:
    assert_valid_api_request(TOOL_LOOP)
    with pytest.raises(InvalidApiRequest) as caught:
        assert_valid_api_request([assistant(""), assistant("b")])
    assert isinstance(caught.value, AgentbusError)
    assert [v.rule for v in caught.value.violations] == [
        "first_message_not_user",
        "empty_content",
        "roles_not_alternating",
        "prefill_not_supported",
    ]
    assert "[first_message_not_user]" in str(caught.value)


def test_api_violation_is_frozen() -> None:
    found = only([user("")], "empty_content")
    with pytest.raises(pydantic.ValidationError):
        found.rule = "other"  # type: ignore[misc]


# --- api_types ----------------------------------------------------------------------------------------


def test_messages_request_typeddict_validates_losslessly_with_pydantic() -> None:
    request: MessagesRequest = {
        "model": "claude-sonnet-4-5",
        "max_tokens": 1024,
        "system": [{"type": "text", "text": "You are terse.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "list files"},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "ls", "signature": SIG},
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt", "is_error": False}],
            },
        ],
    }
    wire = {**request, "betas_future_field": {"x": 1}}
    assert pydantic.TypeAdapter(MessagesRequest).validate_python(wire) == wire
    assert check(request) == []


def test_json_value_is_pydantics() -> None:
    value: JsonValue = {"a": [1, "b", None, {"c": True}]}
    assert pydantic.TypeAdapter(JsonValue).validate_python(value) == value
