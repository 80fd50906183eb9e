"""Streaming accumulation (§9: R9.1–R9.7, R9.9) and the fallback tombstones it owns (R6.1)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.errors import ContentNormalizationError, StreamAccumulationError, UpdateTargetMissing
from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.constants import CONTEXT_WINDOW_EXCEEDED_ERROR, SYNTHETIC_MODEL, max_output_tokens_error
from agentbus_redis.messages.content import (
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolUseBlock,
    UnknownBlock,
)
from agentbus_redis.messages.from_api import assistant_from_api_response, normalize_content_from_api
from agentbus_redis.messages.kinds import AssistantMessage, Message, StreamEventMessage, TombstoneMessage, parse_message
from agentbus_redis.streaming.accumulate import (
    REFUSAL_SUGGESTED_MODEL,
    AssistantMessageUpdated,
    StreamAccumulator,
    StreamOutput,
    apply_assistant_update,
    refusal_error_text,
)
from agentbus_redis.streaming.usage import EMPTY_USAGE, update_usage

MESSAGE_START_USAGE: dict[str, Any] = {
    "input_tokens": 1200,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 3000,
    "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
    "output_tokens": 1,
    "service_tier": "standard",
}


def message_start(message_id: str = "msg_01XYZ", model: str = "claude-opus-4-5") -> dict[str, Any]:
    return {
        "type": "message_start",
        "message": {
            "id": message_id,
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": dict(MESSAGE_START_USAGE),
        },
    }


def block_start(index: int, block: dict[str, Any]) -> dict[str, Any]:
    return {"type": "content_block_start", "index": index, "content_block": block}


def delta(index: int, kind: str, **payload: Any) -> dict[str, Any]:
    return {"type": "content_block_delta", "index": index, "delta": {"type": kind, **payload}}


def block_stop(index: int) -> dict[str, Any]:
    return {"type": "content_block_stop", "index": index}


def message_delta(stop_reason: str | None, output_tokens: int = 87) -> dict[str, Any]:
    return {
        "type": "message_delta",
        "delta": {"type": "message_delta", "stop_reason": stop_reason, "stop_sequence": None},
        "usage": {"output_tokens": output_tokens},
    }


def recorded_stream() -> list[dict[str, Any]]:
    """A response as the API streams it: thinking with signature deltas, text, two tool_uses whose
    JSON input arrives in pieces, then the final usage and stop_reason."""
    return [
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        {"type": "ping"},
        delta(0, "thinking_delta", thinking="The user wants both files. "),
        delta(0, "thinking_delta", thinking="Read them in parallel."),
        delta(0, "signature_delta", signature="EqQBCkYIBxgCKkB-partial"),
        delta(0, "signature_delta", signature="EqQBCkYIBxgCKkB-final=="),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        delta(1, "text_delta", text="I'll read "),
        delta(1, "text_delta", text="both files."),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_01A", "name": "Read", "input": {}}),
        delta(2, "input_json_delta", partial_json=""),
        delta(2, "input_json_delta", partial_json='{"file_path": "/tmp/'),
        delta(2, "input_json_delta", partial_json='a.py"}'),
        block_stop(2),
        block_start(3, {"type": "tool_use", "id": "toolu_01B", "name": "Read", "input": {}}),
        delta(3, "input_json_delta", partial_json='{"file_pa'),
        delta(3, "input_json_delta", partial_json='th": "/tmp/b.py", "limit"'),
        delta(3, "input_json_delta", partial_json=": 20}"),
        block_stop(3),
        message_delta("tool_use"),
        {"type": "message_stop"},
    ]


def accumulator(**options: Any) -> StreamAccumulator:
    clock = FixedClock(datetime(2026, 4, 1, 10, 0, 0, tzinfo=UTC), step_ms=5)
    settings: dict[str, Any] = {"max_output_tokens": 32000, "request_id": "req_011CV", "clock": clock}
    settings["ids"] = SequentialIds()
    settings.update(options)
    return StreamAccumulator(**settings)


def run(events: list[Any], acc: StreamAccumulator | None = None) -> tuple[StreamAccumulator, list[StreamOutput]]:
    acc = acc if acc is not None else accumulator()
    outputs: list[StreamOutput] = []
    for event in events:
        outputs.extend(acc.feed(event))
    return acc, outputs


def assistants(outputs: list[StreamOutput]) -> list[AssistantMessage]:
    return [output for output in outputs if isinstance(output, AssistantMessage)]


# --- R9.1–R9.4: one message per block --------------------------------------------------------


def test_r9_4_one_assistant_message_per_content_block() -> None:
    """R9.2–R9.4: thinking (signature replaced, R9.3), text, and two tool_uses with JSON parsed."""
    _, outputs = run(recorded_stream())
    messages = assistants(outputs)
    assert [message.blocks for message in messages] == [
        [
            ThinkingBlock(
                thinking="The user wants both files. Read them in parallel.", signature="EqQBCkYIBxgCKkB-final=="
            )
        ],
        [TextBlock(text="I'll read both files.")],
        [ToolUseBlock(id="toolu_01A", name="Read", input={"file_path": "/tmp/a.py"})],
        [ToolUseBlock(id="toolu_01B", name="Read", input={"file_path": "/tmp/b.py", "limit": 20})],
    ]


def test_r9_4_split_messages_share_message_id_and_request_id_with_distinct_uuids() -> None:
    """R9.4: the split shape merged later by R4.7 and grouped by R5.2."""
    _, outputs = run(recorded_stream())
    messages = assistants(outputs)
    assert {message.message.id for message in messages} == {"msg_01XYZ"}
    assert {message.request_id for message in messages} == {"req_011CV"}
    assert len({message.uuid for message in messages}) == 4
    assert len({message.timestamp for message in messages}) == 4
    assert all(message.message.model == "claude-opus-4-5" for message in messages)


def test_r9_5_usage_and_stop_reason_land_on_the_last_block_message_only() -> None:
    """R9.5: earlier blocks keep the message_start usage and stop_reason null; the last one is replaced
    (same uuid) with the accumulated usage and the stop_reason."""
    acc, outputs = run(recorded_stream())
    first_three = assistants(outputs)[:3]
    assert all(message.message.stop_reason is None for message in first_three)
    assert all(message.message.usage == MESSAGE_START_USAGE for message in first_three)
    (update,) = [output for output in outputs if isinstance(output, AssistantMessageUpdated)]
    original_last = assistants(outputs)[3]
    assert update.message.uuid == original_last.uuid
    assert update.message.message.stop_reason == "tool_use"
    assert update.message.message.usage == {
        "input_tokens": 1200,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 3000,
        "output_tokens": 87,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "service_tier": "standard",
        "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
        "inference_geo": "",
        "iterations": [],
        "speed": "standard",
    }
    assert update.message.blocks == original_last.blocks
    assert acc.emitted == (*first_three, update.message)
    assert acc.stop_reason == "tool_use"


def test_r9_5_a_consumer_applies_the_update_in_place() -> None:
    """R9.5 as a value: apply_assistant_update replaces the message with the same uuid, in position."""
    _, outputs = run(recorded_stream())
    conversation: list[Message] = []
    for output in outputs:
        if isinstance(output, AssistantMessage):
            conversation.append(output)
        elif isinstance(output, AssistantMessageUpdated):
            conversation = apply_assistant_update(conversation, output)
    assert [m.message.stop_reason for m in conversation if isinstance(m, AssistantMessage)] == [
        None,
        None,
        None,
        "tool_use",
    ]
    stranger = AssistantMessageUpdated(message=assistants(outputs)[0].model_copy(update={"uuid": "nope"}))
    with pytest.raises(UpdateTargetMissing) as raised:
        apply_assistant_update(conversation, stranger)
    assert raised.value.uuid == "nope"


def test_r9_6_every_event_passes_through_in_yield_order() -> None:
    """R9.6: a stream_event after each event, after the assistant message at content_block_stop and
    after the update at message_delta; ttftMs only on message_start."""
    events = recorded_stream()
    acc = accumulator(started_at="2026-04-01T09:59:59.900Z")
    per_event = [acc.feed(event) for event in events]
    for event, produced in zip(events, per_event, strict=True):
        assert isinstance(produced[-1], StreamEventMessage)
        assert produced[-1].event == event
        kinds = [type(output).__name__ for output in produced]
        if event["type"] == "content_block_stop":
            assert kinds == ["AssistantMessage", "StreamEventMessage"]
        elif event["type"] == "message_delta":
            assert kinds == ["AssistantMessageUpdated", "StreamEventMessage"]
        else:
            assert kinds == ["StreamEventMessage"]
    stream_events = [produced[-1] for produced in per_event]
    assert isinstance(stream_events[0], StreamEventMessage)
    assert stream_events[0].ttft_ms == pytest.approx(100.0)
    assert all(isinstance(s, StreamEventMessage) and s.ttft_ms is None for s in stream_events[1:])
    assert "ttftMs" not in stream_events[1].to_wire()


def test_r9_6_without_stream_events_the_rest_is_the_same() -> None:
    """``stream_events=False`` (ingestion's ledger) drops only the R9.6 passthroughs: the messages and
    updates, in order, are those of the default accumulator."""
    _, everything = run(recorded_stream())
    _, without = run(recorded_stream(), accumulator(stream_events=False))
    assert without == [output for output in everything if not isinstance(output, StreamEventMessage)]
    assert without


def test_r9_6_without_start_time_no_ttft() -> None:
    """R1.7: ttftMs is only computed from an injected start time."""
    (only,) = accumulator().feed(message_start())
    assert isinstance(only, StreamEventMessage)
    assert "ttftMs" not in only.to_wire()


def test_r9_4_emitted_messages_round_trip_as_transcript_lines() -> None:
    """R9.4 / R7.2: every emitted message (final versions) dumps to JSON that parse_message reads back
    equal, with camelCase envelope keys and snake_case API keys."""
    acc, _ = run(recorded_stream())
    for message in acc.emitted:
        line = json.loads(message.to_wire_json())
        assert line["type"] == "assistant"
        assert line["requestId"] == "req_011CV"
        assert line["message"]["id"] == "msg_01XYZ"
        assert parse_message(line) == message
    last = json.loads(acc.emitted[-1].to_wire_json())
    assert last["message"]["stop_reason"] == "tool_use"
    assert last["message"]["content"][0]["input"] == {"file_path": "/tmp/b.py", "limit": 20}


def test_r9_2_text_of_the_start_event_is_ignored() -> None:
    """R9.2: the SDK repeats start text in a delta, so the start text is dropped."""
    _, outputs = run(
        [
            message_start(),
            block_start(0, {"type": "text", "text": "Hello", "citations": None}),
            delta(0, "text_delta", text="Hello"),
            delta(0, "citations_delta", citation={"type": "char_location", "cited_text": "x"}),
            block_stop(0),
        ]
    )
    assert assistants(outputs)[0].blocks == [TextBlock(text="Hello", citations=None)]


def test_r9_2_other_blocks_are_copied_and_optional_fields_stay_absent() -> None:
    """R9.2 (anything else → shallow copy); no requestId/advisorModel when none was given."""
    acc = accumulator(request_id=None)
    _, outputs = run(
        [message_start(), block_start(0, {"type": "redacted_thinking", "data": "abc"}), block_stop(0)], acc
    )
    (message,) = assistants(outputs)
    assert message.message.to_wire()["content"] == [{"type": "redacted_thinking", "data": "abc"}]
    assert "requestId" not in message.to_wire()
    assert "advisorModel" not in message.to_wire()


def test_r9_2_server_tool_use_input_accumulates_and_advisor_model_is_stamped() -> None:
    """R9.2/R9.7: server_tool_use input streams as a string too; advisorModel is set when configured."""
    acc = accumulator(advisor_model="claude-advisor")
    _, outputs = run(
        [
            message_start(),
            block_start(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
            delta(0, "input_json_delta", partial_json='{"query": "py'),
            delta(0, "input_json_delta", partial_json='thon"}'),
            block_stop(0),
        ],
        acc,
    )
    (message,) = assistants(outputs)
    assert message.blocks == [ServerToolUseBlock(id="srvtoolu_1", name="web_search", input={"query": "python"})]
    assert message.advisor_model == "claude-advisor"


# --- R9.7 normalizeContentFromAPI --------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw_input", "expected"),
    [
        ("", {}),
        ("{not json", {}),
        ("null", {}),
        ("NaN", {}),
        ('{"a": [1, 2]}', {"a": [1, 2]}),
        ("5", 5),
        ({"already": "object"}, {"already": "object"}),
    ],
)
def test_r9_7_tool_use_input_is_parsed_or_empty(raw_input: JsonValue, expected: JsonValue) -> None:
    """R9.7: JSON-parse a string input; a failure or "" (or null) gives {}; an object stays."""
    (block,) = normalize_content_from_api([{"type": "tool_use", "id": "t", "name": "Bash", "input": raw_input}])
    assert block == ToolUseBlock(id="t", name="Bash", input=expected)


@pytest.mark.parametrize("raw_input", [None, 7, [1], True])
def test_r9_7_non_string_non_object_tool_input_is_an_error(raw_input: JsonValue) -> None:
    """R9.7: a tool_use input that is neither a string nor an object throws."""
    block: dict[str, Any] = {"type": "text", "text": "x"}
    with pytest.raises(ContentNormalizationError) as raised:
        normalize_content_from_api([block, {"type": "tool_use", "id": "t", "name": "Bash", "input": raw_input}])
    assert raised.value.block_index == 1


def test_r9_7_server_tool_use_text_and_other_blocks() -> None:
    """R9.7: server_tool_use strings parse (or {}); mcp_tool_use and blank text pass unchanged."""
    blocks = normalize_content_from_api(
        [
            {"type": "server_tool_use", "id": "s1", "name": "web_search", "input": ""},
            {"type": "server_tool_use", "id": "s2", "name": "web_search", "input": '{"q": 1}'},
            {"type": "mcp_tool_use", "id": "m1", "name": "x", "input": "{}"},
            {"type": "text", "text": "  \n"},
            {"type": "container_upload", "file_id": "f"},
        ]
    )
    assert blocks[0] == ServerToolUseBlock(id="s1", name="web_search", input={})
    assert blocks[1] == ServerToolUseBlock(id="s2", name="web_search", input={"q": 1})
    assert blocks[2] == ServerToolUseBlock(type="mcp_tool_use", id="m1", name="x", input="{}")
    assert blocks[3] == TextBlock(text="  \n")
    assert isinstance(blocks[4], UnknownBlock)
    assert blocks[4].to_wire() == {"type": "container_upload", "file_id": "f"}


# --- R9.5 stop-reason errors ----------------------------------------------------------------------


def stop_with(stop_reason: str, acc: StreamAccumulator | None = None) -> tuple[StreamAccumulator, list[StreamOutput]]:
    return run(
        [
            message_start(),
            block_start(0, {"type": "text", "text": ""}),
            delta(0, "text_delta", text="Partial"),
            block_stop(0),
            message_delta(stop_reason),
        ],
        acc,
    )


def error_message(outputs: list[StreamOutput]) -> AssistantMessage:
    (error,) = [m for m in assistants(outputs) if m.is_api_error_message]
    return error


def test_r9_5_max_tokens_yields_the_output_limit_error() -> None:
    """R9.5: max_tokens → API error assistant quoting N, apiError/error max_output_tokens; after the update."""
    acc, outputs = stop_with("max_tokens", accumulator(max_output_tokens=8192))
    error = error_message(outputs)
    assert error.blocks == [TextBlock(text=max_output_tokens_error(8192))]
    assert error.api_error == "max_output_tokens"
    assert error.error == "max_output_tokens"
    assert error.message.model == SYNTHETIC_MODEL
    assert [type(o).__name__ for o in outputs[-3:]] == [
        "AssistantMessageUpdated",
        "AssistantMessage",
        "StreamEventMessage",
    ]
    assert acc.emitted[-1] == error


def test_r9_5_context_window_exceeded_reuses_the_max_output_tokens_category() -> None:
    """R9.5: model_context_window_exceeded → the context-window text, apiError max_output_tokens."""
    _, outputs = stop_with("model_context_window_exceeded")
    error = error_message(outputs)
    assert error.blocks == [TextBlock(text=CONTEXT_WINDOW_EXCEEDED_ERROR)]
    assert error.api_error == "max_output_tokens"


def test_r9_5_refusal_yields_the_usage_policy_error() -> None:
    """R9.5: refusal → API error assistant with the Usage Policy text, error invalid_request, no apiError."""
    _, outputs = stop_with("refusal")
    error = error_message(outputs)
    assert error.blocks == [TextBlock(text=refusal_error_text("claude-opus-4-5"))]
    assert error.error == "invalid_request"
    assert "apiError" not in error.to_wire()
    assert refusal_error_text("claude-opus-4-5").startswith(
        "API Error: Claude Code is unable to respond to this request, which appears to violate our Usage Policy "
        "(https://www.anthropic.com/legal/aup). Please double press esc"
    )
    assert refusal_error_text("claude-opus-4-5").endswith(
        f"try running /model {REFUSAL_SUGGESTED_MODEL} to switch models."
    )
    assert refusal_error_text(REFUSAL_SUGGESTED_MODEL, interactive=False).endswith(
        "Try rephrasing the request or attempting a different approach."
    )
    _, headless = stop_with("refusal", accumulator(interactive=False, request_model=REFUSAL_SUGGESTED_MODEL))
    assert error_message(headless).blocks == [
        TextBlock(text=refusal_error_text(REFUSAL_SUGGESTED_MODEL, interactive=False))
    ]


def test_r9_5_end_turn_adds_nothing_and_an_empty_response_is_complete() -> None:
    """R9.5/R9.9: a plain stop adds no error; an empty response with a stop_reason is not incomplete."""
    acc, outputs = run([message_start(), message_delta("end_turn", output_tokens=3), {"type": "message_stop"}])
    assert [type(output).__name__ for output in outputs] == ["StreamEventMessage"] * 3
    assert acc.emitted == ()
    assert not acc.is_incomplete()
    assert not acc.needs_fallback()
    assert acc.usage["output_tokens"] == 3


def test_r9_5_update_usage_keeps_input_counts_against_zero_deltas() -> None:
    """R9.5 usage merge: input-side counts change only to positive values; output_tokens takes any
    value; service_tier and inference_geo stay; iterations and speed follow the event."""
    start = update_usage(EMPTY_USAGE, {"input_tokens": 10, "cache_read_input_tokens": 5, "service_tier": "priority"})
    final = update_usage(
        start,
        {
            "input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0,
            "iterations": [{"n": 1}],
            "speed": "fast",
        },
    )
    assert final["input_tokens"] == 10
    assert final["cache_read_input_tokens"] == 5
    assert final["output_tokens"] == 0
    assert final["service_tier"] == "standard"
    assert final["iterations"] == [{"n": 1}]
    assert final["speed"] == "fast"
    assert update_usage(final, None) == final
    assert EMPTY_USAGE["iterations"] == []


# --- errors ------------------------------------------------------------------------------------------

TEXT_BLOCK = {"type": "text", "text": ""}
TOOL_BLOCK = {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}


@pytest.mark.parametrize(
    ("events", "index", "event_type", "reason"),
    [
        ([message_start(), delta(0, "text_delta", text="x")], 1, "content_block_delta", "Content block not found"),
        (
            [message_start(), block_start(0, TEXT_BLOCK), delta(0, "input_json_delta", partial_json="{")],
            2,
            "content_block_delta",
            "Content block is not a input_json block (input_json_delta on a text block)",
        ),
        (
            [message_start(), block_start(0, TOOL_BLOCK), delta(0, "text_delta", text="x")],
            2,
            "content_block_delta",
            "Content block is not a text block",
        ),
        (
            [message_start(), block_start(0, TEXT_BLOCK), delta(0, "signature_delta", signature="s")],
            2,
            "content_block_delta",
            "Content block is not a thinking block",
        ),
        (
            [message_start(), block_start(0, TEXT_BLOCK), delta(0, "thinking_delta", thinking="t")],
            2,
            "content_block_delta",
            "Content block is not a thinking block",
        ),
        (
            [message_start(), block_start(0, TEXT_BLOCK), delta(0, "text_delta", text=5)],
            2,
            "content_block_delta",
            "text_delta has no string 'text'",
        ),
        ([block_start(0, TEXT_BLOCK)], 0, "content_block_start", "content_block_start before message_start"),
        ([message_delta("end_turn")], 0, "message_delta", "message_delta before message_start"),
        ([{"type": "message_stop"}], 0, "message_stop", "message_stop before message_start"),
        ([message_start(), {"type": "message_stop"}, {"type": "ping"}], 2, "ping", "event after message_stop"),
        ([message_start(), message_start()], 1, "message_start", "duplicate message_start"),
        (
            [message_start(), block_start(0, TEXT_BLOCK), block_start(0, TEXT_BLOCK)],
            2,
            "content_block_start",
            "duplicate content block index 0",
        ),
        (
            [message_start(), block_start(0, TEXT_BLOCK), block_stop(0), delta(0, "text_delta", text="x")],
            3,
            "content_block_delta",
            "content block 0 is already stopped",
        ),
        (
            [message_start(), block_start(0, TEXT_BLOCK), block_stop(0), block_stop(0)],
            3,
            "content_block_stop",
            "content block 0 is already stopped",
        ),
        ([message_start(), block_stop(0)], 1, "content_block_stop", "Content block not found"),
        ([message_start(), block_start(-1, TEXT_BLOCK)], 1, "content_block_start", "'index' must be a non-negative"),
        ([message_start(), block_start(0, {"text": ""})], 1, "content_block_start", "'content_block' is not an object"),
        (["message_start"], 0, None, "event is not a JSON object (str)"),
        ([{"index": 0}], 0, None, "event has no string 'type'"),
        ([{"type": "message_start", "message": "x"}], 0, "message_start", "'message' is not an object"),
        ([{"type": "ping", "at": {1, 2}}], 0, "ping", "event is not JSON"),
        (
            [message_start(), {"type": "message_delta", "delta": {"stop_reason": 3}}],
            1,
            "message_delta",
            "'stop_reason' must be a string or null",
        ),
    ],
)
def test_r9_3_malformed_streams_raise_located_errors(
    events: list[Any], index: int, event_type: str | None, reason: str
) -> None:
    """R9.3 and the ordering rules: a typed error naming the event index, its type and what is wrong;
    the attempt is then failed (R9.9 fallback) and refuses further events."""
    acc = accumulator()
    with pytest.raises(StreamAccumulationError) as raised:
        run(events, acc)
    assert raised.value.event_index == index
    assert raised.value.event_type == event_type
    assert reason in raised.value.reason
    assert acc.failure is raised.value
    assert acc.needs_fallback()
    with pytest.raises(StreamAccumulationError, match="already failed"):
        acc.feed({"type": "ping"})


def test_r9_3_unknown_events_and_ping_pass_through_only() -> None:
    """R9.6: unknown top-level event types and ping are yielded as stream_event and change nothing."""
    _, outputs = run([message_start(), {"type": "ping"}, {"type": "future_event", "data": [1]}])
    assert [o.event["type"] for o in outputs if isinstance(o, StreamEventMessage)] == [
        "message_start",
        "ping",
        "future_event",
    ]


# --- R9.9 fallback detection and R6.1 tombstones --------------------------------------------------------


@pytest.mark.parametrize(
    ("events", "incomplete"),
    [
        ([], True),
        ([{"type": "ping"}], True),
        ([message_start()], True),
        ([message_start(), block_start(0, TEXT_BLOCK), delta(0, "text_delta", text="cut")], True),
        ([message_start(), block_start(0, TEXT_BLOCK), block_stop(0)], False),
        ([message_start(), message_delta("end_turn")], False),
        (recorded_stream(), False),
    ],
)
def test_r9_9_incomplete_stream_detection(events: list[Any], incomplete: bool) -> None:
    """R9.9: no message_start, or message_start without a completed block and without a stop_reason."""
    acc, _ = run(events)
    assert acc.is_incomplete() is incomplete
    assert acc.needs_fallback() is incomplete


def test_r9_9_error_event_fails_the_attempt_and_r6_1_tombstones_every_emitted_message() -> None:
    """R9.9: an ``error`` event is a stream error (the SDK throws: no stream_event); R6.1: the fallback
    tombstones every assistant message this attempt yielded, in their latest versions."""
    overloaded = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    events = recorded_stream()[:12]
    acc, outputs = run([*events, overloaded])
    assert acc.stream_error == {"type": "overloaded_error", "message": "Overloaded"}
    assert not acc.is_incomplete()
    assert acc.needs_fallback()
    tombstones = acc.fallback_tombstones()
    assert all(isinstance(t, TombstoneMessage) for t in tombstones)
    assert [t.message for t in tombstones] == assistants(outputs)
    assert len(tombstones) == 2
    with pytest.raises(StreamAccumulationError, match="after an 'error' event"):
        acc.feed({"type": "ping"})


def test_r6_1_tombstones_carry_the_updated_message_and_api_errors() -> None:
    """R6.1: every assistant collected in the attempt, including a stop-reason API error, with the
    final usage the update applied (Claude Code tombstones the mutated object)."""
    acc, outputs = stop_with("max_tokens")
    tombstones = acc.fallback_tombstones()
    updated = next(o for o in outputs if isinstance(o, AssistantMessageUpdated)).message
    assert [t.message for t in tombstones] == [updated, error_message(outputs)]


def test_r9_9_non_streaming_fallback_result_is_one_message_with_all_blocks() -> None:
    """R9.9: the fallback response becomes one assistant message; its content is normalized (R9.7)."""
    response: dict[str, Any] = {
        **message_start()["message"],
        "content": [
            {"type": "thinking", "thinking": "plan", "signature": "sig"},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/tmp/a.py"}},
        ],
        "stop_reason": "tool_use",
    }
    message = assistant_from_api_response(
        response, request_id="req_1", clock=lambda: "2026-04-01T10:00:00.000Z", ids=SequentialIds()
    )
    assert message.blocks == [
        ThinkingBlock(thinking="plan", signature="sig"),
        ToolUseBlock(id="toolu_1", name="Read", input={"file_path": "/tmp/a.py"}),
    ]
    assert message.request_id == "req_1"
    assert message.message.id == "msg_01XYZ"
    assert parse_message(message.to_wire()) == message
    with pytest.raises(ContentNormalizationError):
        assistant_from_api_response({**response, "content": "text"})


def test_r9_3_unknown_delta_types_are_ignored_like_claude_code() -> None:
    """R9.3/R9.6: a delta type newer than this code is skipped (the raw event still passes through)."""
    accumulator = StreamAccumulator(max_output_tokens=100)
    accumulator.feed(message_start())
    accumulator.feed(block_start(0, TEXT_BLOCK))
    outputs = accumulator.feed(delta(0, "connector_text_delta", connector_text="x"))
    assert [type(output).__name__ for output in outputs] == ["StreamEventMessage"]
    assert accumulator.failure is None
