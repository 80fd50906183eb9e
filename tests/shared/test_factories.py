"""Factories, constants and derived ids (§2, §3)."""

from __future__ import annotations

from typing import TypedDict

import pytest

from agentbus_redis.clock import Clock, FixedClock
from agentbus_redis.ids import IdSource, SequentialIds
from agentbus_redis.messages import constants as c
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    annotate_boundary_with_preserved_segment,
    create_assistant_api_error_message,
    create_assistant_message,
    create_compact_boundary_message,
    create_informational_message,
    create_model_switch_breadcrumbs,
    create_tool_result_stop_message,
    create_user_interruption_message,
    create_user_message,
    derive_short_message_id,
    derive_uuid,
    is_synthetic_api_error,
    is_synthetic_message,
    prepare_user_content,
)


class Deps(TypedDict):
    clock: Clock
    ids: IdSource


@pytest.fixture
def deps() -> Deps:
    return {"clock": FixedClock(), "ids": SequentialIds()}


def test_r2_2a_empty_string_becomes_no_content(deps: Deps) -> None:
    assert create_user_message("", **deps).message.content == "(no content)"
    assert create_user_message([], **deps).message.content == []
    assert create_user_message("hi", **deps).message.content == "hi"


def test_r2_2b_ids_and_timestamps_come_only_from_injected_sources() -> None:
    message = create_user_message("hi", clock=FixedClock(), ids=SequentialIds())
    assert message.uuid == "00000000-0000-4000-8000-000000000001"
    assert message.timestamp == "2026-01-01T00:00:00.000Z"
    given = create_user_message("hi", uuid="u1", timestamp="2026-04-01T10:00:00.123Z")
    assert (given.uuid, given.timestamp) == ("u1", "2026-04-01T10:00:00.123Z")


def test_r2_2b_absent_flags_stay_absent_on_the_wire(deps: Deps) -> None:
    wire = create_user_message("hi", is_meta=True, **deps).to_wire()
    assert wire == {
        "type": "user",
        "message": {"role": "user", "content": "hi"},
        "uuid": "00000000-0000-4000-8000-000000000001",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "isMeta": True,
    }


def test_r2_2c_interruption_message_is_array_form(deps: Deps) -> None:
    plain = create_user_interruption_message(tool_use=False, **deps)
    for_tool = create_user_interruption_message(tool_use=True, **deps)
    assert plain.message.content == [TextBlock(text="[Request interrupted by user]")]
    assert for_tool.message.content == [TextBlock(text="[Request interrupted by user for tool use]")]
    assert plain.is_meta is None


def test_r2_2d_tool_result_stop_message() -> None:
    assert create_tool_result_stop_message("t1").to_wire() == {
        "type": "tool_result",
        "content": c.CANCEL_MESSAGE,
        "is_error": True,
        "tool_use_id": "t1",
    }


def test_r2_2e_prepare_user_content() -> None:
    assert prepare_user_content("x", []) == "x"
    image = TextBlock(text="pre")
    assert prepare_user_content("x", [image]) == [image, TextBlock(text="x")]


def test_r2_2f_model_switch_breadcrumbs(deps: Deps) -> None:
    caveat, command, stdout = create_model_switch_breadcrumbs("opus", "Opus 4", **deps)
    assert caveat.is_meta is True
    assert caveat.message.content == c.LOCAL_COMMAND_CAVEAT
    assert command.message.content == (
        "<command-name>/model</command-name>\n            <command-message>model</command-message>\n"
        "            <command-args>opus</command-args>"
    )
    assert stdout.message.content == "<local-command-stdout>Set model to Opus 4</local-command-stdout>"


def test_r2_3a_synthetic_assistant_defaults(deps: Deps) -> None:
    message = create_assistant_message("", **deps)
    wire = message.to_wire()
    assert wire["message"]["model"] == "<synthetic>"  # type: ignore[index,call-overload]
    assert wire["message"]["content"] == [{"type": "text", "text": "(no content)"}]  # type: ignore[index,call-overload]
    assert wire["message"]["stop_reason"] == "stop_sequence"  # type: ignore[index,call-overload]
    assert wire["message"]["stop_sequence"] == ""  # type: ignore[index,call-overload]
    assert wire["isApiErrorMessage"] is False
    assert message.message.usage is not None
    assert message.message.usage["server_tool_use"] == {"web_search_requests": 0, "web_fetch_requests": 0}


def test_r2_3b_array_content_is_verbatim(deps: Deps) -> None:
    block = ToolUseBlock(id="t1", name="Bash", input={"command": "ls"})
    assert create_assistant_message([block], **deps).blocks == [block]
    assert create_assistant_message([], **deps).blocks == []


def test_r2_3c_synthetic_api_error(deps: Deps) -> None:
    error = create_assistant_api_error_message(c.CONTEXT_WINDOW_EXCEEDED_ERROR, api_error="max_output_tokens", **deps)
    assert is_synthetic_api_error(error)
    assert not is_synthetic_api_error(create_assistant_message("x", **deps))
    assert c.max_output_tokens_error(32000).startswith("API Error: Claude's response exceeded the 32000 output")


def test_r2_1c_is_synthetic_message(deps: Deps) -> None:
    assert is_synthetic_message(create_user_interruption_message(tool_use=False, **deps))
    assert not is_synthetic_message(create_user_message(c.INTERRUPT_MESSAGE, **deps))


def test_r2_1_constants_are_byte_exact() -> None:
    assert c.SYNTHETIC_TOOL_RESULT_PLACEHOLDER == "[Tool result missing due to internal error]"
    assert c.INTERRUPT_MESSAGE_FOR_TOOL_USE == "[Request interrupted by user for tool use]"
    assert c.auto_reject_message("Bash").startswith("Permission to use Bash has been denied. IMPORTANT: You *may*")
    assert c.dont_ask_reject_message("Bash").startswith(
        "Permission to use Bash has been denied because Claude Code is running in don't ask mode. IMPORTANT"
    )
    assert "  " not in c.DENIAL_WORKAROUND_GUIDANCE
    assert c.build_yolo_rejection_message("risky").startswith(
        "Permission for this action has been denied. Reason: risky. If you have other tasks"
    )
    assert c.is_classifier_denial(c.build_yolo_rejection_message("x"))
    assert c.with_memory_correction_hint("x") == "x"
    assert c.with_memory_correction_hint("x", auto_memory=True, amber_prism=True) == "x" + c.MEMORY_CORRECTION_HINT


def test_r2_4b_compact_boundary(deps: Deps) -> None:
    plain = create_compact_boundary_message("manual", 1000, **deps)
    assert "logicalParentUuid" not in plain.to_wire()
    linked = create_compact_boundary_message("auto", 5, last_pre_compact_uuid="prev", **deps)
    assert linked.to_wire()["logicalParentUuid"] == "prev"
    assert linked.content == "Conversation compacted"
    kept = [create_user_message("a", **deps), create_user_message("b", **deps)]
    annotated = annotate_boundary_with_preserved_segment(linked, "anchor", kept)
    assert annotated.compact_metadata is not None
    assert annotated.compact_metadata["preservedSegment"] == {
        "headUuid": kept[0].uuid,
        "anchorUuid": "anchor",
        "tailUuid": kept[1].uuid,
    }
    assert annotate_boundary_with_preserved_segment(linked, "anchor", []) is linked


def test_informational_prevent_continuation_only_when_true(deps: Deps) -> None:
    assert "preventContinuation" not in create_informational_message("x", **deps).to_wire()
    wire = create_informational_message("x", prevent_continuation=True, **deps).to_wire()
    assert wire["preventContinuation"] is True


def test_r3_1_derive_uuid() -> None:
    assert derive_uuid("3f2a9c1e-7b4d-4e8a-9f01-23456789abcd", 1) == "3f2a9c1e-7b4d-4e8a-9f01-000000000001"
    assert derive_uuid("3f2a9c1e-7b4d-4e8a-9f01-23456789abcd", 10) == "3f2a9c1e-7b4d-4e8a-9f01-00000000000a"


def test_r2_4d_derive_short_message_id() -> None:
    assert derive_short_message_id("3f2a9c1e-7b4d-4e8a-9f01-23456789abcd") == "3gmrpp"
