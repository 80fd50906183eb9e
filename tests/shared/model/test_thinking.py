"""M1.6 thinking capabilities and the API §1.10 fit of thinking with the open assistant turn."""

from __future__ import annotations

import copy

import pytest
from hypothesis import given

from agentbus_redis.api.request_view import THINKING_TYPES, read_request
from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.thinking import (
    DEFAULT_THINKING_CAPABILITIES,
    open_turn_assistants,
    open_turn_blocks_thinking,
    strip_open_turn_thinking,
    strip_thinking,
    thinking_param,
)
from tests.shared.model.api_builders import assistant, messages, text, thinking, tool_result, tool_use, user


@pytest.mark.parametrize(
    ("model", "thinks", "adaptive"),
    [
        ("claude-opus-4-6", True, True),
        ("claude-sonnet-4-6", True, True),
        ("claude-opus-4-7", True, True),
        ("claude-sonnet-4-5-20250929", True, False),
        ("claude-haiku-4-5", True, False),
        ("claude-opus-4-1", True, False),
        ("claude-3-7-sonnet-20250219", False, False),
        ("claude-3-5-haiku", False, False),
        ("claude-mythos-5", True, True),
    ],
)
def test_m1_6_capabilities(model: str, thinks: bool, adaptive: bool) -> None:
    assert DEFAULT_THINKING_CAPABILITIES.supports_thinking(model) is thinks
    assert DEFAULT_THINKING_CAPABILITIES.supports_adaptive(model) is adaptive


def test_m1_6_budget_is_upper_limit_minus_one_capped_by_max_tokens() -> None:
    assert thinking_param("claude-opus-4-1", None, max_tokens=32_000, upper_limit=32_000) == {
        "type": "enabled",
        "budget_tokens": 31_999,
    }
    assert thinking_param("claude-sonnet-4-5", None, max_tokens=64_000, upper_limit=64_000) == {
        "type": "enabled",
        "budget_tokens": 63_999,
    }
    assert thinking_param("claude-sonnet-4-5", {"type": "disabled"}, max_tokens=64_000, upper_limit=64_000) is None


@given(messages())
def test_api_1_10_open_turn_matches_request_view(history: list[JsonObject]) -> None:
    """The light scan finds the same open turn as the shared request view of api_validation."""
    view = read_request({"messages": history}, thinking_enabled=None, allow_prefill=True)
    assert open_turn_assistants(history) == [message.index for message in view.open_assistant_turn()]


@given(messages())
def test_api_1_10_strip_never_mutates_and_leaves_no_open_turn_thinking(history: list[JsonObject]) -> None:
    before = copy.deepcopy(history)
    stripped = strip_open_turn_thinking(history)
    assert history == before
    for index in open_turn_assistants(stripped):
        content = stripped[index]["content"]
        kinds = [block.get("type") for block in content] if isinstance(content, list) else []
        # Only a message that would be left empty keeps its thinking (it could not be sent either way).
        only_thinking = bool(kinds) and all(kind in THINKING_TYPES for kind in kinds)
        assert only_thinking or not any(kind in THINKING_TYPES for kind in kinds)


def test_api_1_10_tool_loop_needs_leading_thinking() -> None:
    assert open_turn_blocks_thinking([user("q"), assistant(text("a"), tool_use("t1")), user(tool_result("t1"))])
    assert not open_turn_blocks_thinking([user("q"), assistant(thinking(), tool_use("t1")), user(tool_result("t1"))])
    assert not open_turn_blocks_thinking([user("q"), assistant(text("a")), user("next")])


def test_m6_6_strip_thinking_drops_an_emptied_last_message_only() -> None:
    history = [user("q"), assistant(thinking()), user("r"), assistant(thinking())]
    assert strip_thinking(history) == [user("q"), assistant(thinking()), user("r")]
