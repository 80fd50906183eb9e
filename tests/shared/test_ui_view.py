"""The UI projection (§3, §5.1–5.2): normalizeMessages, the emptiness filter, the R3.4 pipeline,
reorderMessagesInUI, sibling lookups and errored server tool uses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE, NO_CONTENT_MESSAGE
from agentbus_redis.messages.content import (
    ContentBlock,
    ImageBlock,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentbus_redis.messages.factories import create_compact_boundary_message, derive_uuid
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AssistantPayload,
    AttachmentMessage,
    Message,
    ProgressMessage,
    UserMessage,
    UserPayload,
    parse_message,
)
from agentbus_redis.messages.system import ApiErrorSystemMessage, InformationalSystemMessage
from agentbus_redis.messages.ui_view import (
    errored_server_tool_uses,
    is_not_empty_message,
    normalize_messages,
    reorder_messages_in_ui,
    sibling_tool_use_ids,
    ui_messages,
)

U1 = "11111111-1111-4111-8111-111111111111"
U2 = "22222222-2222-4222-8222-222222222222"
U3 = "33333333-3333-4333-8333-333333333333"
U4 = "44444444-4444-4444-8444-444444444444"
TS = "2026-04-01T10:00:00.123Z"


def assistant(uuid: str, *content: ContentBlock, message_id: str = "msg_1", **fields: object) -> AssistantMessage:
    payload = AssistantPayload(id=message_id, type="message", role="assistant", model="claude-x", content=list(content))
    return AssistantMessage(type="assistant", message=payload, uuid=uuid, timestamp=TS, **fields)


def user(uuid: str, content: str | list[ContentBlock], **fields: object) -> UserMessage:
    return UserMessage(
        type="user", message=UserPayload(role="user", content=content), uuid=uuid, timestamp=TS, **fields
    )


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


def tool_use(tool_use_id: str) -> ToolUseBlock:
    return ToolUseBlock(id=tool_use_id, name="Bash", input={"command": "ls"})


def tool_result(tool_use_id: str) -> ToolResultBlock:
    return ToolResultBlock(tool_use_id=tool_use_id, content="ok")


def hook(event: str, tool_use_id: str, uuid: str, kind: str = "hook_success") -> AttachmentMessage:
    attachment = {"type": kind, "hookName": f"{event}:Bash", "toolUseID": tool_use_id, "hookEvent": event}
    return AttachmentMessage(type="attachment", attachment=attachment, uuid=uuid, timestamp=TS)


def api_error(uuid: str) -> ApiErrorSystemMessage:
    return ApiErrorSystemMessage(type="system", subtype="api_error", level="error", uuid=uuid, timestamp=TS)


def uuids(messages: list[Message]) -> list[str | None]:
    return [getattr(message, "uuid", None) for message in messages]


def shape(messages: list[Message]) -> list[tuple[str, str | None, list[str]]]:
    """(type, uuid, block types) for every message."""
    result: list[tuple[str, str | None, list[str]]] = []
    for message in messages:
        blocks = [b.type for b in message.blocks] if isinstance(message, UserMessage | AssistantMessage) else []
        result.append((message.type, getattr(message, "uuid", None), blocks))
    return result


# --- R3.2 normalizeMessages -------------------------------------------------------------------


def test_r3_2_spec_example_verbatim() -> None:
    """R3.2 example: [A(u1,[text]), A(u2,[thinking,tool_use]), U(u3,[tool_result]), U(u4,"hi")]."""
    messages: list[Message] = [
        assistant(U1, text("a")),
        assistant(U2, ThinkingBlock(thinking="t", signature="s"), tool_use("toolu_1")),
        user(U3, [tool_result("toolu_1")]),
        user(U4, "hi"),
    ]
    normalized = normalize_messages(messages)
    assert shape(normalized) == [
        ("assistant", U1, ["text"]),
        ("assistant", derive_uuid(U2, 0), ["thinking"]),
        ("assistant", derive_uuid(U2, 1), ["tool_use"]),
        ("user", derive_uuid(U3, 0), ["tool_result"]),
        ("user", derive_uuid(U4, 0), ["text"]),
    ]
    last = normalized[-1]
    assert isinstance(last, UserMessage)
    assert last.message.content == [TextBlock(text="hi")]


def test_r3_2_is_new_chain_is_sticky_and_string_users_do_not_flip_it() -> None:
    """R3.2 (1, 3): uuids before the first multi-block message stay; after it every one is derived."""
    messages: list[Message] = [
        user(U1, "first"),
        assistant(U2, text("single")),
        user(U3, [text("x"), text("y")]),
        assistant(U4, text("after")),
    ]
    assert uuids(normalize_messages(messages)) == [
        U1,
        U2,
        derive_uuid(U3, 0),
        derive_uuid(U3, 1),
        derive_uuid(U4, 0),
    ]
    only_strings = normalize_messages([user(U1, "a"), user(U2, "b")])
    assert uuids(only_strings) == [U1, U2]


def test_r3_2_assistant_keeps_only_listed_fields() -> None:
    """R3.2 (2): kept: timestamp, whole message (context_management → null), isMeta, isVirtual,
    requestId, error, isApiErrorMessage, advisorModel. Dropped: apiError, errorDetails, the transcript
    envelope and unknown extras (Claude Code builds a new object)."""
    line: JsonObject = {
        "parentUuid": U1,
        "isSidechain": False,
        "sessionId": "ses",
        "cwd": "/tmp",
        "type": "assistant",
        "effort": "medium",
        "uuid": U2,
        "timestamp": TS,
        "requestId": "req_1",
        "isMeta": True,
        "isVirtual": True,
        "error": None,
        "isApiErrorMessage": False,
        "apiError": "max_output_tokens",
        "errorDetails": "details",
        "advisorModel": "claude-adv",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            "stop_reason": None,
            "stop_details": {"type": "end_turn"},
        },
    }
    first, second = normalize_messages([parse_message(line)])
    assert first.to_wire() == {
        "type": "assistant",
        "uuid": derive_uuid(U2, 0),
        "timestamp": TS,
        "requestId": "req_1",
        "isMeta": True,
        "isVirtual": True,
        "error": None,
        "isApiErrorMessage": False,
        "advisorModel": "claude-adv",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-x",
            "content": [{"type": "text", "text": "a"}],
            "stop_reason": None,
            "stop_details": {"type": "end_turn"},
            "context_management": None,
        },
    }
    assert uuids([second]) == [derive_uuid(U2, 1)]


def test_r3_2_absent_fields_stay_absent() -> None:
    """R3.2: Claude Code copies undefined fields, which JSON drops; nothing is invented."""
    (only,) = normalize_messages([assistant(U1, text("a"))])
    assert set(only.to_wire()) == {"type", "uuid", "timestamp", "message"}


def test_r3_2_user_array_keeps_listed_fields_and_drops_the_rest() -> None:
    """R3.2 (4): kept: toolUseResult, mcpMeta, isMeta, isVisibleInTranscriptOnly, isVirtual, timestamp,
    origin. Dropped: sourceToolAssistantUUID, permissionMode, isCompactSummary, summarizeMetadata,
    sourceToolUseID, the envelope, extras (also those of ``message``)."""
    line: JsonObject = {
        "parentUuid": U1,
        "sessionId": "ses",
        "type": "user",
        "uuid": U3,
        "timestamp": TS,
        "toolUseResult": {"stdout": "ok"},
        "mcpMeta": {"structuredContent": {"a": 1}},
        "isMeta": True,
        "isVisibleInTranscriptOnly": True,
        "isVirtual": True,
        "origin": {"kind": "human"},
        "sourceToolAssistantUUID": U2,
        "permissionMode": "default",
        "isCompactSummary": True,
        "summarizeMetadata": {"messagesSummarized": 3},
        "sourceToolUseID": "toolu_1",
        "futureField": 1,
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}], "x": 1},
    }
    (only,) = normalize_messages([parse_message(line)])
    assert only.to_wire() == {
        "type": "user",
        "uuid": U3,
        "timestamp": TS,
        "toolUseResult": {"stdout": "ok"},
        "mcpMeta": {"structuredContent": {"a": 1}},
        "isMeta": True,
        "isVisibleInTranscriptOnly": True,
        "isVirtual": True,
        "origin": {"kind": "human"},
        "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1"}]},
    }


def test_r3_2_user_string_keeps_every_field() -> None:
    """R3.2 (3): a string user message is copied whole (envelope and extras too), content → one text block."""
    line: JsonObject = {
        "parentUuid": U1,
        "sessionId": "ses",
        "type": "user",
        "uuid": U3,
        "timestamp": TS,
        "permissionMode": "plan",
        "futureField": 1,
        "message": {"role": "user", "content": "hello"},
    }
    (only,) = normalize_messages([parse_message(line)])
    expected_message: JsonObject = {"role": "user", "content": [{"type": "text", "text": "hello"}]}
    assert only.to_wire() == {**line, "message": expected_message}


def test_r3_2_image_paste_ids_follow_the_image_blocks() -> None:
    """R3.2 (4): the k-th image block gets [k-th id]; other blocks and images without an id get none."""
    image = ImageBlock(source={"type": "base64", "media_type": "image/png", "data": "AAAA"})
    message = user(U1, [text("look"), image, image, image], image_paste_ids=[7, 9])
    normalized = normalize_messages([message])
    assert [m.to_wire().get("imagePasteIds") for m in normalized] == [None, [7], [9], None]


def test_r3_2_empty_content_produces_nothing_and_other_kinds_pass_through() -> None:
    """R3.2 (2, 5): [] → no message; attachment, progress and system pass through as the same objects."""
    attachment = hook("PreToolUse", "toolu_1", U1)
    progress = ProgressMessage(type="progress", data={"type": "bash_progress"}, uuid=U2, timestamp=TS)
    system = InformationalSystemMessage(type="system", subtype="informational", content="i", uuid=U3, timestamp=TS)
    messages: list[Message] = [
        assistant(U4, text("a"), text("b")),
        attachment,
        assistant(U1),
        user(U2, []),
        progress,
        system,
    ]
    normalized = normalize_messages(messages)
    assert len(normalized) == 5
    assert normalized[2] is attachment
    assert normalized[3] is progress
    assert normalized[4] is system


def test_r3_2_corpus_transcripts_split_into_single_block_messages(corpus_root: Path) -> None:
    """R1.9 / R3.2 on real transcripts: every user/assistant output holds exactly one block and the
    number of outputs is the number of blocks; the result still dumps to parseable wire JSON."""
    checked = 0
    for path in sorted((corpus_root / "claude-code").rglob("*.jsonl")):
        messages: list[Message] = []
        for raw in path.read_text(encoding="utf-8").splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and line.get("type") in ("user", "assistant", "system", "attachment", "progress"):
                try:
                    messages.append(parse_message(line))
                except ValueError:
                    continue
        expected = 0
        for message in messages:
            if isinstance(message, UserMessage | AssistantMessage):
                is_string = isinstance(message.message.content, str) and message.type == "user"
                expected += 1 if is_string else len(message.blocks)
            else:
                expected += 1
        normalized = normalize_messages(messages)
        assert len(normalized) == expected, path
        for message in normalized:
            if isinstance(message, UserMessage | AssistantMessage):
                assert isinstance(message.message.content, list)
                assert len(message.message.content) == 1
            assert parse_message(message.to_wire()) == message
        checked += len(messages)
    assert checked > 0


# --- R3.3 isNotEmptyMessage ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        (user(U1, "hi"), True),
        (user(U1, "  \n"), False),
        (user(U1, []), False),
        (user(U1, [text(""), text("")]), True),
        (user(U1, [tool_result("t")]), True),
        (user(U1, [text("  ")]), False),
        (user(U1, [text(NO_CONTENT_MESSAGE)]), False),
        (user(U1, [text(INTERRUPT_MESSAGE_FOR_TOOL_USE)]), False),
        (user(U1, [text(INTERRUPT_MESSAGE)]), True),
        (assistant(U1, text("ok")), True),
        (assistant(U1), False),
        (hook("Stop", "t", U1), True),
        (api_error(U1), True),
    ],
)
def test_r3_3_is_not_empty_message(message: Message, expected: bool) -> None:
    """R3.3: the UI emptiness filter."""
    assert is_not_empty_message(message) is expected


# --- R3.4 pipeline ------------------------------------------------------------------------------


def test_r3_4_pipeline_slices_at_last_compact_boundary_unless_verbose() -> None:
    """R3.4: non-verbose views start at the last compact boundary (included); progress is dropped."""
    ids = SequentialIds()
    boundary = create_compact_boundary_message("auto", 1000, clock=lambda: TS, ids=ids)
    progress = ProgressMessage(type="progress", data={"type": "bash_progress"}, uuid=U4, timestamp=TS)
    messages: list[Message] = [user(U1, "old"), boundary, user(U2, "new"), progress, assistant(U3, text("a"))]
    assert uuids(ui_messages(messages)) == [boundary.uuid, U2, U3]
    assert uuids(ui_messages(messages, verbose=True)) == [U1, boundary.uuid, U2, U3]


def test_r3_4_should_show_user_message() -> None:
    """R3.4: meta users hidden (channel-origin ones only with the gated channels feature);
    transcript-only users shown only in transcript mode; empty ones dropped."""
    meta = user(U1, "meta", is_meta=True)
    channel = user(U2, "from channel", is_meta=True, origin={"kind": "channel", "server": "s"})
    summary = user(U3, "summary", is_visible_in_transcript_only=True)
    blank = user(U4, [text(NO_CONTENT_MESSAGE)])
    messages: list[Message] = [meta, channel, summary, blank]
    assert ui_messages(messages) == []
    assert uuids(ui_messages(messages, transcript_mode=True)) == [U3]
    assert uuids(ui_messages(messages, channels_visible=True)) == [U2]


# --- R5.1 reorderMessagesInUI ---------------------------------------------------------------------


def test_r5_1_spec_example_verbatim() -> None:
    """R5.1 example: [A t1, U "q", Post t1, U tr t1, Pre t1] → [A t1, Pre t1, U tr t1, Post t1, U "q"]."""
    a_t1 = assistant(U1, tool_use("t1"))
    question = user(U2, [text("q")])
    post = hook("PostToolUse", "t1", U3)
    result = user(U4, [tool_result("t1")])
    pre = hook("PreToolUse", "t1", "55555555-5555-4555-8555-555555555555")
    assert reorder_messages_in_ui([a_t1, question, post, result, pre]) == [a_t1, pre, result, post, question]


def test_r5_1_orphan_results_and_hooks_are_not_shown() -> None:
    """R5.1 [OBS]: results and Pre/Post hooks whose tool_use is absent disappear; other hooks stay put."""
    stop_hook = hook("Stop", "t9", U3)
    kept = user(U4, [text("q")])
    messages: list[Message] = [user(U1, [tool_result("t9")]), hook("PostToolUse", "t9", U2), stop_hook, kept]
    assert reorder_messages_in_ui(messages) == [stop_hook, kept]


def test_r5_1_groups_keep_hook_order_and_the_latest_result() -> None:
    """R5.1 (1): several hooks keep their order; a later tool_result for the same id replaces an earlier."""
    a_t1 = assistant(U1, tool_use("t1"))
    pre_a, pre_b = hook("PreToolUse", "t1", "p-a"), hook("PreToolUse", "t1", "p-b", kind="hook_additional_context")
    first, second = user(U2, [tool_result("t1")]), user(U3, [tool_result("t1")])
    assert reorder_messages_in_ui([pre_a, first, a_t1, pre_b, second]) == [a_t1, pre_a, pre_b, second]


def test_r5_1_non_hook_attachments_are_not_grouped() -> None:
    """R5.1 (1): only the listed hook kinds join a tool group."""
    a_t1 = assistant(U1, tool_use("t1"))
    other = AttachmentMessage(
        type="attachment",
        attachment={"type": "todo_reminder", "hookEvent": "PreToolUse", "toolUseID": "t1"},
        uuid=U2,
        timestamp=TS,
    )
    assert reorder_messages_in_ui([other, a_t1]) == [other, a_t1]


def test_r5_1_api_errors_collapse_and_only_a_trailing_one_survives() -> None:
    """R5.1 (3, 5): consecutive api_errors keep the newest; all but a last-element one are removed."""
    e1, e2, e3 = api_error("e1"), api_error("e2"), api_error("e3")
    prompt = user(U1, [text("q")])
    assert reorder_messages_in_ui([prompt, e1, e2]) == [prompt, e2]
    assert reorder_messages_in_ui([e1, prompt, e2, e3]) == [prompt, e3]
    assert reorder_messages_in_ui([e1, e2, prompt]) == [prompt]


def test_r5_1_synthetic_streaming_tool_uses_go_last() -> None:
    """R5.1 (4, 5): synthetic streaming tool uses are appended, after which a trailing api_error is gone."""
    synthetic = assistant(derive_uuid("toolu_9", 0), tool_use("toolu_9"))
    prompt = user(U1, [text("q")])
    assert reorder_messages_in_ui([prompt, api_error("e1")], [synthetic]) == [prompt, synthetic]


def test_r5_1_duplicate_and_idless_tool_use_requests() -> None:
    """R5.1 (2): a tool_use id is emitted once, at its first position, as its latest message; a
    request whose first block has no id is dropped (Claude Code's pass 2 skips it)."""
    first = assistant(U1, tool_use("t1"))
    again = assistant(U2, tool_use("t1"))
    idless = parse_message(
        {
            "type": "assistant",
            "uuid": U3,
            "timestamp": TS,
            "message": {"role": "assistant", "content": [{"type": "tool_use", "name": "Bash", "input": {}}]},
        }
    )
    prompt = user(U4, [text("q")])
    assert reorder_messages_in_ui([first, prompt, again, idless]) == [again, prompt]


def test_r3_4_r5_1_full_pipeline_on_a_split_turn() -> None:
    """R3.4 + R5.1: one multi-block assistant with two tool_uses, results in one user message."""
    turn: list[Message] = [
        user(U1, "run both"),
        assistant(U2, text("running"), tool_use("t1"), tool_use("t2")),
        user(U3, [tool_result("t2"), tool_result("t1")]),
    ]
    assert shape(ui_messages(turn)) == [
        ("user", U1, ["text"]),
        ("assistant", derive_uuid(U2, 0), ["text"]),
        ("assistant", derive_uuid(U2, 1), ["tool_use"]),
        ("user", derive_uuid(U3, 1), ["tool_result"]),
        ("assistant", derive_uuid(U2, 2), ["tool_use"]),
        ("user", derive_uuid(U3, 0), ["tool_result"]),
    ]


# --- R5.2 sibling lookups ----------------------------------------------------------------------------


def test_r5_2_sibling_tool_use_ids_group_by_api_message_id() -> None:
    """R5.2: tool_uses of split messages sharing message.id are siblings; another response is not."""
    messages: list[Message] = [
        assistant(U1, tool_use("t1"), message_id="msg_a"),
        assistant(U2, tool_use("t2"), message_id="msg_a"),
        assistant(U3, text("x"), tool_use("t3"), message_id="msg_b"),
    ]
    siblings = sibling_tool_use_ids(messages)
    assert siblings == {"t1": {"t1", "t2"}, "t2": {"t1", "t2"}, "t3": {"t3"}}


def test_r5_2_unanswered_server_tool_uses_are_errored_except_in_the_last_assistant() -> None:
    """R5.2: server_tool_use/mcp_tool_use without a result count as errored, unless they belong to the
    last (possibly in-flight) assistant response."""
    answered = ServerToolUseBlock(id="srv_ok", name="web_search", input={})
    answer = ServerToolResultBlock(type="web_search_tool_result", tool_use_id="srv_ok", content=[])
    orphan = ServerToolUseBlock(id="srv_lost", name="web_search", input={})
    mcp_orphan = ServerToolUseBlock(type="mcp_tool_use", id="mcp_lost", name="x", input={})
    in_flight_a = ServerToolUseBlock(id="srv_live_a", name="web_fetch", input={})
    in_flight_b = ServerToolUseBlock(id="srv_live_b", name="web_fetch", input={})
    messages: list[Message] = [
        assistant(U1, answered, answer, orphan, message_id="msg_a"),
        assistant(U2, mcp_orphan, message_id="msg_b"),
        user(U3, "next"),
        assistant(U4, in_flight_a, message_id="msg_c"),
        assistant("u5", in_flight_b, message_id="msg_c"),
    ]
    assert errored_server_tool_uses(messages) == {"srv_lost", "mcp_lost"}
    assert errored_server_tool_uses([*messages, user("u6", "later")]) == {
        "srv_lost",
        "mcp_lost",
        "srv_live_a",
        "srv_live_b",
    }
