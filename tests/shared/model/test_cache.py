"""M9: prompt-cache breakpoints as Claude Code places them (M9.4, M9.5) within the API's 4 (M9.1)."""

from __future__ import annotations

import copy

from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cache import (
    MAX_CACHE_BREAKPOINTS,
    apply_cache_breakpoints,
    cache_control,
    count_cache_breakpoints,
    mark_messages,
)
from tests.shared.model.api_builders import (
    MARKER,
    assistant,
    messages,
    text,
    thinking,
    tool_definitions,
    tool_result,
    tool_use,
    user,
)

SYSTEM = [text("You are a Claude agent, built on Anthropic's Claude Agent SDK."), text("Be brief.")]


def test_m9_5_marker_value_5m_has_no_ttl_1h_has_ttl() -> None:
    assert cache_control("5m") == {"type": "ephemeral"}
    assert cache_control("1h") == {"type": "ephemeral", "ttl": "1h"}


def test_m9_4_example_default_mode() -> None:
    """M9.4's example: both system blocks marked, the one message marker on the last message's last block."""
    params: JsonObject = {
        "system": SYSTEM,
        "messages": [user("hi"), assistant(tool_use("t1")), user(tool_result("t1"))],
    }
    result = apply_cache_breakpoints(params)
    assert [block.get("cache_control") for block in result["system"]] == [MARKER, MARKER]
    assert result["messages"][-1]["content"][-1]["cache_control"] == MARKER
    assert result["messages"][0] == user("hi")
    assert count_cache_breakpoints(result) == 3


def test_m9_4_string_content_becomes_one_text_block() -> None:
    assert mark_messages([user("hello")]) == [{"role": "user", "content": [text("hello", cache_control=MARKER)]}]


def test_m9_4_assistant_ending_in_thinking_gets_no_marker() -> None:
    last = assistant(text("a"), thinking())
    assert mark_messages([user("q"), last]) == [user("q"), last]
    redacted = assistant({"type": "redacted_thinking", "data": "x"})
    assert mark_messages([user("q"), redacted])[-1] == redacted


def test_m9_4_assistant_last_text_block_marked() -> None:
    result = mark_messages([user("q"), assistant(thinking(), text("answer"))])
    assert result[-1] == assistant(thinking(), text("answer", cache_control=MARKER))


def test_m9_4_skip_cache_write_marks_second_to_last() -> None:
    result = mark_messages([user("a"), assistant(text("b")), user("c")], skip_cache_write=True)
    assert result == [user("a"), assistant(text("b", cache_control=MARKER)), user("c")]


def test_m9_4_empty_text_never_marked() -> None:
    """The API refuses ``cache_control`` on an empty text block (anthropic-api-rules.md)."""
    assert mark_messages([user("")]) == [user("")]
    assert mark_messages([user(text(""))]) == [user(text(""))]


def test_m9_4_stale_message_markers_removed_including_nested() -> None:
    stale = user(tool_result("t1", [text("x", cache_control=MARKER)], cache_control=MARKER))
    result = mark_messages([stale, assistant(text("b")), user("c")])
    assert result[0] == user(tool_result("t1", [text("x")]))
    assert count_cache_breakpoints({"messages": result}) == 1


def test_m9_1_tool_markers_kept_within_limit_last_ones_first() -> None:
    tools = [{"name": n, "input_schema": {}, "cache_control": MARKER} for n in ("A", "B", "C")]
    result = apply_cache_breakpoints({"system": SYSTEM, "messages": [user("q")], "tools": tools})
    kept = [tool["name"] for tool in result["tools"] if "cache_control" in tool]
    assert kept == ["C"]
    assert count_cache_breakpoints(result) == MAX_CACHE_BREAKPOINTS


def test_m9_6_disabled_places_no_markers() -> None:
    params: JsonObject = {"system": SYSTEM, "messages": [user(text("a", cache_control=MARKER))]}
    result = apply_cache_breakpoints(params, enabled=False)
    assert count_cache_breakpoints(result) == 0


def test_m9_5_one_hour_ttl_on_every_marker() -> None:
    result = apply_cache_breakpoints({"system": SYSTEM, "messages": [user("q")]}, ttl="1h")
    assert result["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}
    assert result["messages"][0]["content"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


@given(messages(), tool_definitions(), st.booleans(), st.sampled_from(["5m", "1h"]), st.booleans())
def test_m9_1_never_more_than_four_breakpoints_and_input_untouched(
    history: list[JsonObject], tools: list[JsonObject], enabled: bool, ttl: str, skip: bool
) -> None:
    params: JsonObject = {"system": copy.deepcopy(SYSTEM), "messages": history, "tools": tools}
    before = copy.deepcopy(params)
    result = apply_cache_breakpoints(params, enabled=enabled, ttl=ttl, skip_cache_write=skip)
    assert params == before
    assert count_cache_breakpoints(result) <= MAX_CACHE_BREAKPOINTS
    message_markers = count_cache_breakpoints({"messages": result["messages"]})
    assert message_markers <= 1
    # Only cache_control keys differ: same messages and blocks otherwise.
    assert _strip(_stringless(result["messages"])) == _strip(_stringless(history))


def _stringless(history: list[JsonObject]) -> list[JsonObject]:
    """Messages with non-empty string content as one text block (how the marker rewrites the marked one)."""
    return [
        {**m, "content": [text(m["content"])]} if isinstance(m["content"], str) and m["content"] else m for m in history
    ]


def _strip(value: object) -> object:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value
