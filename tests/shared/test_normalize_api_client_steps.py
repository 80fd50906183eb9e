"""Steps after normalizeMessagesForAPI (R4.22–R4.23) and how the pairing repairs are reported."""

from __future__ import annotations

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import ADVISOR_RESPONSE, SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import ApiMessage
from agentbus_redis.messages.pairing import PairingRepairRequired
from agentbus_redis.normalize import (
    NormalizeOptions,
    RepairKind,
    apply_api_client_steps,
    strip_advisor_blocks,
    strip_excess_media_items,
    strip_tool_search_fields,
)
from tests.shared.normalize_builders import (
    assistant,
    image,
    server_result,
    server_use,
    shape,
    text,
    thinking,
    tool_reference,
    tool_result,
    tool_use,
    user,
    wire,
)


def _steps(
    messages: list[ApiMessage], options: NormalizeOptions | None = None
) -> tuple[list[ApiMessage], list[RepairKind]]:
    result, repairs, _ = apply_api_client_steps(
        messages, options=options or NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(1000)
    )
    return result, [repair.kind for repair in repairs]


def test_r4_22_tool_search_fields_stripped_again() -> None:
    """R4.22 (model without tool search): tool_references are stripped again and, when a tool_use
    carries a non-null ``caller``, every tool_use of that message is rebuilt as {type,id,name,input}."""
    with_caller = assistant(tool_use("t1", caller={"type": "direct"}), tool_use("t2", cache_hint=1))
    refs = user([tool_result("t1", [tool_reference("Grep")]), tool_result("t2")])
    stripped, repairs = strip_tool_search_fields([with_caller, refs])
    assert wire(stripped[0]) == [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {}},
        {"type": "tool_use", "id": "t2", "name": "Bash", "input": {}},
    ]
    assert [r.kind for r in repairs] == [
        RepairKind.TOOL_USE_EXTRA_KEYS_DROPPED,
        RepairKind.TOOL_USE_EXTRA_KEYS_DROPPED,
        RepairKind.TOOL_REFERENCE_REMOVED,
    ]
    null_caller = assistant(tool_use("t1", caller=None))
    assert strip_tool_search_fields([null_caller]) == ([null_caller], [])


def test_r4_22_order_pairing_runs_between_strip_and_advisor() -> None:
    """R4.22: the missing result is repaired (R4.28 placeholder first) and reported with its uuid."""
    a = assistant(tool_use("t1"), tool_use("t2"))
    next_user = user([tool_result("t2")])
    result, kinds = _steps([user("q"), a, next_user])
    block = result[2].blocks[0]
    assert isinstance(block, ToolResultBlock)
    assert (block.tool_use_id, block.content, block.is_error) == ("t1", SYNTHETIC_TOOL_RESULT_PLACEHOLDER, True)
    assert kinds == [RepairKind.PLACEHOLDER_TOOL_RESULT_INSERTED]


def test_r4_29_placeholder_message_reported_with_output_uuid() -> None:
    """R4.29: ``[U, A[t1]]`` → a meta user message with the placeholder, reported with its uuid."""
    result, repairs, pairing = apply_api_client_steps(
        [user("q"), assistant(tool_use("t1"))], options=NormalizeOptions(), clock=FixedClock(), ids=SequentialIds(1)
    )
    assert shape(result) == ["U[text]", "A[tool_use]", "U[tool_result]"]
    assert result[2].is_meta is True
    inserted = [r for r in repairs if r.kind is RepairKind.PLACEHOLDER_MESSAGE_INSERTED]
    assert [r.message_uuid for r in inserted] == [result[2].uuid]
    assert pairing.inserted_messages == (2,)


def test_r4_30_strict_pairing_raises() -> None:
    """R4.30: strict pairing refuses to repair."""
    with pytest.raises(PairingRepairRequired):
        _steps([user("q"), assistant(tool_use("t1"))], NormalizeOptions(strict_pairing=True))


def test_r4_22_advisor_blocks_stripped_without_beta() -> None:
    """R4.22: advisor server_tool_use / advisor_tool_result go; an assistant left with only thinking or
    blank text gets ``[Advisor response]``; other server tools are untouched."""
    advisor = assistant(thinking("t"), server_use("srv_1", "advisor"), server_result("srv_1", "advisor_tool_result"))
    mixed = assistant(server_use("srv_2", "advisor"), server_result("srv_2", "advisor_tool_result"), text("answer"))
    search = assistant(server_use("srv_3"), server_result("srv_3"), text("found"))
    result, repairs = strip_advisor_blocks([advisor, mixed, search])
    assert wire(result[0]) == [thinking("t").to_wire(), {"type": "text", "text": ADVISOR_RESPONSE, "citations": []}]
    assert wire(result[1]) == [{"type": "text", "text": "answer"}]
    assert result[2] is search
    assert [r.kind for r in repairs] == [RepairKind.ADVISOR_BLOCK_STRIPPED] * 2
    kept, kinds = _steps([user("q"), advisor], NormalizeOptions(advisor_enabled=True))
    assert RepairKind.ADVISOR_BLOCK_STRIPPED not in kinds
    assert shape(kept)[1] == "A[thinking,server_tool_use,advisor_tool_result]"


def test_r4_23_excess_media_oldest_first_nested_before_top_level() -> None:
    """R4.23: over the limit, the oldest media go first — within a message, items nested in
    tool_results before top-level ones."""
    first = user([image("top1"), tool_result("t1", [image("nested1"), text("x")])])
    second = user([image("top2")])
    result, repairs = strip_excess_media_items([first, assistant(text("a")), second], limit=1)
    assert wire(result[0]) == [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "x"}]}]
    assert result[2] is second
    assert [r.kind for r in repairs] == [RepairKind.EXCESS_MEDIA_STRIPPED]
    assert repairs[0].detail == "2 item(s)"
    partial, _ = strip_excess_media_items([first, second], limit=2)
    assert shape(partial) == ["U[image,tool_result]", "U[image]"]
    nested = partial[0].blocks[1]
    assert isinstance(nested, ToolResultBlock)
    assert nested.content == [text("x")]
    assert strip_excess_media_items([first, second], limit=3) == ([first, second], [])


def test_r4_25_to_r4_29_examples_through_the_client_steps() -> None:
    """§4.6 examples, as the R4.22 steps see them after normalizeMessagesForAPI."""
    orphan_first, _ = _steps([user([tool_result("t9")]), assistant(text("a")), user("q")])
    assert wire(orphan_first[0]) == [
        {"type": "text", "text": "[Orphaned tool result removed due to conversation resume]"}
    ]

    duplicate, kinds = _steps([user("q"), assistant(tool_use("t1")), user([tool_result("t1"), tool_result("t1")])])
    assert shape(duplicate) == ["U[text]", "A[tool_use]", "U[tool_result]"]
    assert kinds == [RepairKind.DUPLICATE_TOOL_RESULT_DROPPED]

    repeated, kinds = _steps(
        [
            user("q"),
            assistant(tool_use("t1"), msg_id="A1"),
            user([tool_result("t1")]),
            assistant(tool_use("t1"), msg_id="A2"),
            user([tool_result("t1")]),
        ]
    )
    assert wire(repeated[3]) == [{"type": "text", "text": "[Tool use interrupted]", "citations": []}]
    assert repeated[4].message.content == "(no content)"
    assert repeated[4].is_meta is True
    assert RepairKind.TOOL_USE_INTERRUPTED in kinds
    assert RepairKind.RESULT_MESSAGE_EMPTIED in kinds

    not_adjacent, _ = _steps(
        [assistant(tool_use("t1")), user([text("hi")]), assistant(text("ok")), user([tool_result("t1")])]
    )
    assert shape(not_adjacent) == ["A[tool_use]", "U[tool_result,text]", "A[text]", "U[text]"]
    assert not_adjacent[3].message.content == "(no content)"
