"""Issue 29: a reply's tool results reach the model in the order of its calls (``results_in_call_order``), however
they completed — Claude Code's own order (R8.8, completion order) stays the default."""

from __future__ import annotations

from agentbus_redis.normalize import NormalizeOptions, to_api_request
from agentbus_redis.normalize.api_client_steps import order_tool_results_by_call
from tests.shared.normalize_builders import assistant, text, tool_result, tool_use, user

CALL_ORDER = NormalizeOptions(results_in_call_order=True)


def history() -> list:  # type: ignore[type-arg]
    """Three parallel calls answered c, a, b (three result messages, as the log holds them), then an answer."""
    return [
        user("go"),
        assistant(tool_use("a", "Read"), tool_use("b", "forecast"), tool_use("c", "Glob")),
        user([tool_result("c", "C")]),
        user([tool_result("a", "A")]),
        user([tool_result("b", "B")]),
        assistant(text("done")),
    ]


def result_ids(request: dict) -> list[str]:  # type: ignore[type-arg]
    return [block["tool_use_id"] for block in request["messages"][2]["content"] if block["type"] == "tool_result"]


def test_results_follow_the_calls_when_asked() -> None:
    assert result_ids(to_api_request(history(), prompt="next", options=CALL_ORDER).request) == ["a", "b", "c"]


def test_claude_codes_completion_order_is_the_default() -> None:
    assert result_ids(to_api_request(history(), prompt="next").request) == ["c", "a", "b"]


def test_other_blocks_keep_their_places_and_an_ordered_message_is_left_alone() -> None:
    calls = assistant(tool_use("a"), tool_use("b"))
    mixed = user([tool_result("b"), tool_result("a"), text("note")])
    (_, reordered) = order_tool_results_by_call([calls, mixed])
    assert [getattr(block, "tool_use_id", getattr(block, "text", None)) for block in reordered.blocks] == [
        "a",
        "b",
        "note",
    ]
    ordered = user([tool_result("a"), tool_result("b")])
    assert order_tool_results_by_call([calls, ordered])[1] is ordered
