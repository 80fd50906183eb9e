"""The message model (§1): every kind parses, dumps back unchanged, and stays lossless."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.content import CONTENT_BLOCKS_ADAPTER, TextBlock, ToolUseBlock, UnknownBlock, is_malformed
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AttachmentMessage,
    ProgressMessage,
    StreamEventMessage,
    StreamRequestStartMessage,
    TombstoneMessage,
    ToolUseSummaryMessage,
    UserMessage,
    dump_message,
    parse_message,
)
from agentbus_redis.messages.system import (
    ApiErrorSystemMessage,
    CompactBoundarySystemMessage,
    LocalCommandSystemMessage,
    OtherSystemMessage,
    StopHookSummarySystemMessage,
    TurnDurationSystemMessage,
)
from agentbus_redis.wire import field_or_none

MESSAGE_TYPES = {"user", "assistant", "system", "progress", "attachment"}


def _corpus_message_lines(corpus_root: Path) -> list[tuple[str, int, dict[str, object]]]:
    found = []
    for path in sorted((corpus_root / "claude-code").rglob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(data, dict) and data.get("type") in MESSAGE_TYPES:
                found.append((f"{path.relative_to(corpus_root)}:{number}", number, data))
    return found


def test_r1_1_every_corpus_message_line_round_trips(corpus_root: Path) -> None:
    """R1.1/R7.3: every message line of the real corpus parses and dumps back to an equal JSON value;
    the lines that fail are exactly the deliberately malformed ones of edge_cases.jsonl."""
    failures: list[str] = []
    parsed = 0
    for where, _number, data in _corpus_message_lines(corpus_root):
        try:
            message = parse_message(data)
        except ValidationError:
            failures.append(where)
            continue
        assert dump_message(message) == data, where
        parsed += 1
    assert parsed > 2500
    assert failures == [
        "claude-code/daaain__claude-code-log/edge_cases.jsonl:10",
        "claude-code/daaain__claude-code-log/edge_cases.jsonl:11",
        "claude-code/daaain__claude-code-log/edge_cases.jsonl:18",
    ]


@pytest.mark.parametrize(
    ("data", "model"),
    [
        (
            {"type": "user", "uuid": "u", "timestamp": "t", "message": {"role": "user", "content": "hi"}},
            UserMessage,
        ),
        (
            {
                "type": "assistant",
                "uuid": "a",
                "timestamp": "t",
                "message": {"id": "msg_1", "model": "m", "role": "assistant", "content": []},
            },
            AssistantMessage,
        ),
        (
            {"type": "system", "subtype": "local_command", "uuid": "s", "timestamp": "t"},
            LocalCommandSystemMessage,
        ),
        (
            {"type": "system", "subtype": "compact_boundary", "uuid": "s", "timestamp": "t"},
            CompactBoundarySystemMessage,
        ),
        ({"type": "system", "subtype": "api_error", "uuid": "s", "timestamp": "t"}, ApiErrorSystemMessage),
        (
            {"type": "system", "subtype": "turn_duration", "uuid": "s", "timestamp": "t"},
            TurnDurationSystemMessage,
        ),
        (
            {"type": "system", "subtype": "stop_hook_summary", "uuid": "s", "timestamp": "t"},
            StopHookSummarySystemMessage,
        ),
        (
            {"type": "system", "subtype": "brand_new_subtype", "uuid": "s", "timestamp": "t"},
            OtherSystemMessage,
        ),
        (
            {
                "type": "progress",
                "uuid": "p",
                "timestamp": "t",
                "data": {"type": "bash_progress"},
                "toolUseID": "x",
            },
            ProgressMessage,
        ),
        (
            {"type": "attachment", "uuid": "a", "timestamp": "t", "attachment": {"type": "file"}},
            AttachmentMessage,
        ),
        ({"type": "stream_event", "event": {"type": "message_stop"}}, StreamEventMessage),
        ({"type": "stream_request_start"}, StreamRequestStartMessage),
        (
            {
                "type": "tool_use_summary",
                "summary": "s",
                "precedingToolUseIds": ["t"],
                "uuid": "u",
                "timestamp": "t",
            },
            ToolUseSummaryMessage,
        ),
    ],
)
def test_r1_1_each_kind_has_its_own_model(data: dict[str, object], model: type) -> None:
    """R1.1/R1.4/R1.7: the union dispatches on ``type`` (and ``subtype`` for system)."""
    message = parse_message(data)  # type: ignore[arg-type]
    assert type(message) is model
    assert dump_message(message) == data


def test_r1_7_tombstone_wraps_a_message() -> None:
    inner = {"type": "assistant", "uuid": "a", "timestamp": "t", "message": {"id": "m", "content": []}}
    tombstone = parse_message({"type": "tombstone", "message": inner})
    assert isinstance(tombstone, TombstoneMessage)
    assert isinstance(tombstone.message, AssistantMessage)
    assert dump_message(tombstone) == {"type": "tombstone", "message": inner}


def test_lossless_unknown_fields_and_blocks_survive() -> None:
    data = {
        "type": "assistant",
        "uuid": "a",
        "timestamp": "t",
        "futureField": {"x": [1, 2]},
        "message": {
            "id": "m",
            "role": "assistant",
            "content": [
                {"type": "container_upload", "file_id": "f"},
                {"type": "text", "text": "x", "extra": 1},
            ],
            "brand_new": True,
        },
    }
    message = parse_message(data)
    assert isinstance(message, AssistantMessage)
    assert isinstance(message.blocks[0], UnknownBlock)
    assert dump_message(message) == data


def test_snake_case_keys_on_the_wire_stay_extras() -> None:
    """A stray ``session_id`` beside ``sessionId`` (schema drift) is kept, not merged."""
    data = {
        "type": "user",
        "uuid": "u",
        "timestamp": "t",
        "sessionId": "camel",
        "session_id": "snake",
        "message": {"role": "user", "content": "x"},
    }
    message = parse_message(data)
    assert message.session_id == "camel"  # type: ignore[union-attr]
    assert dump_message(message) == data


def test_malformed_known_block_is_kept_verbatim_and_flagged() -> None:
    """A tool_use without an id cannot be paired; it is preserved but marked malformed."""
    blocks = CONTENT_BLOCKS_ADAPTER.validate_python([{"type": "tool_use", "name": "Bash", "input": {}}])
    assert isinstance(blocks[0], UnknownBlock)
    assert is_malformed(blocks[0])
    assert not is_malformed(ToolUseBlock(id="t", name="Bash"))


def test_invalid_message_reports_its_location() -> None:
    with pytest.raises(ValidationError) as info:
        parse_message({"type": "user", "uuid": "u", "timestamp": "t", "message": {"role": "user", "content": [7]}})
    assert ("user", "message", "content", "str") in [error["loc"] for error in info.value.errors()]


def test_constructed_blocks_always_dump_their_type() -> None:
    assert TextBlock(text="x").to_wire() == {"type": "text", "text": "x"}


def test_validation_does_not_run_the_constructor() -> None:
    """Wire losslessness (wire.py): a discriminator absent from the input stays absent — validation
    does not go through ``WireModel.__init__`` (which would cost every validated object a Python call)
    — while one a constructor left to its default is dumped."""
    read = TextBlock.model_validate({"text": "x"})
    assert read.to_wire() == {"text": "x"}
    assert TextBlock(text="x").to_wire_json() == '{"type":"text","text":"x"}'
    assert TextBlock.__pydantic_custom_init__ is False


def test_field_or_none_finds_what_getattr_finds() -> None:
    """``field_or_none`` (the request builder's and the ledger's field read, without pydantic's costly miss
    path) answers what ``getattr(model, name, None)`` does: a field, a field set to None, a kept unknown
    field under its wire name, and None for a name the model has neither as a field nor as an extra."""
    line: dict[str, JsonValue] = {"type": "user", "uuid": "u1", "timestamp": "t", "parentUuid": None}
    message = parse_message({**line, "message": {"role": "user", "content": "hi"}, "tool_use_id": "toolu_kept"})
    for name in ("uuid", "parent_uuid", "tool_use_id", "parent_tool_use_id", "compact_metadata", "nothing"):
        assert field_or_none(message, name) == getattr(message, name, None), name
    assert field_or_none(message, "tool_use_id") == "toolu_kept"
    assert field_or_none(message, "parent_tool_use_id") is None


def test_a_wire_object_nested_in_a_bus_record_dumps_only_what_it_was_given() -> None:
    """R1.1 losslessness through a bus record: absent stays absent, an explicit null stays null, and the
    message and block unions are dumped by each value's own model."""
    data = {
        "type": "assistant",
        "uuid": "a",
        "timestamp": "t",
        "parentUuid": None,
        "message": {"id": "m", "role": "assistant", "content": [{"type": "text", "text": "x"}], "usage": None},
    }
    entry = LogEntry(session_id="s", seq=1, message=parse_message(data))
    assert orjson.loads(entry.to_wire_json()) == {"v": 1, "session_id": "s", "seq": 1, "message": data}
    assert LogEntry.model_validate_json(entry.to_wire_json()) == entry
