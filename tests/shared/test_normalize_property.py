"""Property-based chaos tests: whatever history Claude Code (or a broken transcript) hands us, the
normalized request is one the Messages API accepts, and nothing real is lost or invented.

Oracles: :func:`agentbus_redis.api.validation.validate_api_request` (API §1/§3) for acceptance; the facts
recorded by :func:`tests.shared.strategies.chaos_histories` for retraction (R6.1/R6.3) and for the
results pairing must keep (R4.25–R4.28).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, note, settings

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.messages.pairing import (
    PairingRepairRequired,
    ensure_tool_result_pairing,
    tool_result_ids,
    tool_use_ids,
)
from tests.shared.strategies import ChaosHistory, chaos_histories, describe_all, pairing_inputs

if TYPE_CHECKING:
    from agentbus_redis.normalize import NormalizedRequest

CHAOS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

Block = Mapping[str, object]


def _normalize(history: ChaosHistory) -> NormalizedRequest:
    from agentbus_redis.normalize import to_api_request

    return to_api_request(list(history.messages), prompt="next", clock=FixedClock(), ids=SequentialIds())


def _request_blocks(request: Mapping[str, object]) -> Iterator[tuple[int, str, Block]]:
    """(message index, role, block) for every block of the request (string content yields none)."""
    messages = request.get("messages")
    assert isinstance(messages, list)
    for index, message in enumerate(messages):
        assert isinstance(message, Mapping)
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            assert isinstance(block, Mapping)
            yield index, str(message.get("role")), block


def _marker(block: Block) -> str | None:
    tool_input = block.get("input")
    marker = tool_input.get("marker") if isinstance(tool_input, Mapping) else None
    return marker if isinstance(marker, str) else None


def _tool_uses_by_marker(request: Mapping[str, object]) -> dict[str, list[Block]]:
    found: dict[str, list[Block]] = {}
    for _, _, block in _request_blocks(request):
        marker = _marker(block) if block.get("type") == "tool_use" else None
        if marker is not None:
            found.setdefault(marker, []).append(block)
    return found


def _show(history: ChaosHistory, request: Mapping[str, object]) -> None:
    note(f"history:\n{describe_all(history.messages)}")
    note(f"request messages:\n{json.dumps(request.get('messages'), indent=1)[:6000]}")


# --- to_api_request ---------------------------------------------------------------------------------


@CHAOS
@given(chaos_histories())
def test_normalized_request_is_accepted_by_the_api(history: ChaosHistory) -> None:
    """API §1/§3: the validator finds nothing to object to, whatever the history."""
    from agentbus_redis.api.validation import validate_api_request

    result = _normalize(history)
    _show(history, result.request)
    violations = validate_api_request(result.request)
    assert violations == [], "\n".join(f"[{v.rule}] {v.detail}" for v in violations)


def _leaked_retracted_tool_uses(history: ChaosHistory, request: Mapping[str, object]) -> list[str]:
    """R6.1/R6.3: markers of tool_uses that existed only in retracted messages yet were sent."""
    return sorted(set(_tool_uses_by_marker(request)) & history.retracted_markers)


def _live_tool_uses_not_sent_once(history: ChaosHistory, request: Mapping[str, object]) -> dict[str, int]:
    """R4.7/R4.26: marker → times sent, for live tool_uses not sent exactly once."""
    sent = _tool_uses_by_marker(request)
    counts = {marker: len(sent.get(marker, [])) for marker in history.required_markers}
    return {marker: count for marker, count in counts.items() if count != 1}


def _lost_real_results(history: ChaosHistory, request: Mapping[str, object]) -> list[str]:
    """R4.10/R4.25–R4.28: problems with the real results of surviving tool_uses."""
    sent = _tool_uses_by_marker(request)
    results = [block for _, _, block in _request_blocks(request) if block.get("type") == "tool_result"]
    problems: list[str] = []
    for marker, expected_text in sorted(history.expected_results.items()):
        if len(sent.get(marker, [])) != 1:
            continue  # not surviving (or sent twice): reported by _live_tool_uses_not_sent_once
        tool_use_id = sent[marker][0].get("id")
        carrying = [block for block in results if f"result {marker} " in json.dumps(block.get("content"))]
        if len(carrying) != 1:
            problems.append(f"{marker}: {len(carrying)} tool_result blocks carry its results (expected 1)")
            continue
        content, answers = carrying[0].get("content"), carrying[0].get("tool_use_id")
        if expected_text not in json.dumps(content):
            problems.append(f"{marker}: kept {content!r}, expected the first ({expected_text!r})")
        if answers != tool_use_id:
            problems.append(f"{marker}: result answers {answers!r}, the tool_use id is {tool_use_id!r}")
    return problems


@CHAOS
@given(chaos_histories())
def test_r6_r4_28_tool_traffic_is_neither_lost_nor_invented(history: ChaosHistory) -> None:
    """Three facts about tool traffic (hypothesis reports each failing assertion separately):

    * R6.1/R6.3: a tool_use that existed only in tombstoned messages is never sent;
    * R4.7/R4.26: every tool_use of a live, non-virtual assistant after the last compact boundary is
      sent exactly once (this also keeps the other checks from passing on an empty request);
    * R4.10/R4.25–R4.28: a surviving tool_use whose real result is in the history (after it, possibly
      split, shuffled, duplicated or delayed behind a user prompt) is answered by that first result,
      once, never by a placeholder.
    """
    request = _normalize(history).request
    _show(history, request)
    leaked = _leaked_retracted_tool_uses(history, request)
    assert leaked == [], f"tool_uses of tombstoned messages were sent: {leaked}"
    not_once = _live_tool_uses_not_sent_once(history, request)
    assert not_once == {}, f"live tool_use marker → times sent (expected 1): {not_once}"
    lost = _lost_real_results(history, request)
    assert lost == [], "; ".join(lost)


@CHAOS
@given(chaos_histories())
def test_normalization_is_deterministic(history: ChaosHistory) -> None:
    """Same history, same FixedClock/SequentialIds → the same request and the same report."""
    first, second = _normalize(history), _normalize(history)
    _show(history, first.request)
    assert first.request == second.request
    assert first.report == second.report


# --- ensure_tool_result_pairing alone -----------------------------------------------------------------


def _pair(messages: Sequence[ApiMessage]) -> list[ApiMessage]:
    result, _ = ensure_tool_result_pairing(messages, clock=FixedClock(), ids=SequentialIds())
    note(f"input:\n{describe_all(messages)}\noutput:\n{describe_all(result)}")
    return result


def _assert_tool_uses_answered_in_next_message(result: Sequence[ApiMessage]) -> None:
    """R4.28/R4.29: every tool_use of message k has exactly one result in message k+1."""
    for k, message in enumerate(result):
        uses = tool_use_ids(message)
        if not uses:
            continue
        assert k + 1 < len(result), f"message {k} ends the list with tool_uses {uses}"
        answered = tool_result_ids(result[k + 1])
        assert sorted(answered) == sorted(uses), f"message {k}: tool_uses {uses}, next answers {answered}"


def _assert_results_answer_previous_assistant(result: Sequence[ApiMessage]) -> None:
    """R4.25/R4.28: every tool_result block (well-formed or not) of message k+1 answers a tool_use of
    assistant k; none follows a user message or starts the list."""
    for k, message in enumerate(result):
        if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
            continue
        results = [block for block in message.message.content if block.type == "tool_result"]
        if not results:
            continue
        previous = result[k - 1] if k else None
        assert isinstance(previous, AssistantMessage), f"message {k} has tool_results but no assistant before it"
        uses = set(tool_use_ids(previous))
        for block in results:
            assert isinstance(block, ToolResultBlock), f"message {k}: malformed tool_result kept"
            assert block.tool_use_id in uses, f"message {k}: {block.tool_use_id} answers nothing in {sorted(uses)}"


@settings(max_examples=200, deadline=None)
@given(pairing_inputs())
def test_r4_25_to_r4_29_pairing_invariants(messages: list[ApiMessage]) -> None:
    """After pairing: every tool_use of message k is answered once in k+1 (R4.28/R4.29), every
    tool_result of k+1 answers a tool_use of k (R4.25/R4.28), and tool_use ids are unique (R4.26)."""
    result = _pair(messages)
    _assert_tool_uses_answered_in_next_message(result)
    _assert_results_answer_previous_assistant(result)
    ids = [tid for message in result for tid in tool_use_ids(message)]
    assert len(ids) == len(set(ids)), f"duplicate tool_use ids: {ids}"


@settings(max_examples=200, deadline=None)
@given(pairing_inputs())
def test_r4_25_pairing_is_idempotent(messages: list[ApiMessage]) -> None:
    """A paired conversation needs no further repair: a second pass changes nothing."""
    once = _pair(messages)
    twice, report = ensure_tool_result_pairing(once, clock=FixedClock(), ids=SequentialIds())
    assert not report.repaired, report.summary()
    assert twice == once


@settings(max_examples=200, deadline=None)
@given(pairing_inputs())
def test_r4_30_strict_mode_raises_exactly_when_a_repair_is_needed(messages: list[ApiMessage]) -> None:
    """R4.30: strict mode refuses precisely the inputs the lenient pass would change."""
    result, report = ensure_tool_result_pairing(messages, clock=FixedClock(), ids=SequentialIds())
    if report.repaired:
        with pytest.raises(PairingRepairRequired) as raised:
            ensure_tool_result_pairing(messages, strict=True, clock=FixedClock(), ids=SequentialIds())
        assert raised.value.report == report
    else:
        assert result == list(messages)
        assert ensure_tool_result_pairing(messages, strict=True)[0] == result


@settings(max_examples=200, deadline=None)
@given(pairing_inputs())
def test_r4_28_placeholders_only_for_tool_uses_without_adjacent_result(messages: list[ApiMessage]) -> None:
    """R4.27/R4.28: a placeholder is inserted exactly for the surviving tool_uses whose result is not in
    the next input message; real adjacent results are never replaced."""
    result, report = ensure_tool_result_pairing(messages, clock=FixedClock(), ids=SequentialIds())
    placeholders = [
        block
        for message in result
        if isinstance(message, UserMessage) and not isinstance(message.message.content, str)
        for block in message.message.content
        if isinstance(block, ToolResultBlock)
        and block.is_error
        and block.content == "[Tool result missing due to internal error]"
    ]
    assert [block.tool_use_id for block in placeholders] == [fix.tool_use_id for fix in report.placeholders_inserted]
    real_results = sum(
        1
        for message in result
        for block in message.blocks
        if isinstance(block, ToolResultBlock) and block.content != "[Tool result missing due to internal error]"
    )
    assert real_results + len(placeholders) == sum(len(tool_use_ids(m)) for m in result)
