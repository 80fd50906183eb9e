"""M8 and M4.11: prompt-too-long parsing, context-overflow recovery, the pre-flight blocking limit and
the truncated-reply recovery state machine (M12 vectors included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.model.limits.window import (
    OUTPUT_TOKEN_RECOVERY_MESSAGE,
    ContextOverflow,
    ContextOverflowAction,
    OutputLimitAction,
    OutputLimitError,
    OutputLimitState,
    PromptTooLong,
    autocompact_threshold,
    blocking_limit,
    context_window,
    decide_context_overflow,
    decide_output_limit,
    is_blocked,
    is_prompt_too_long,
    loop_max_tokens,
    output_limit_error,
    parse_context_overflow,
    parse_prompt_too_long,
    preflight_context_overflow,
)


def test_m8_2_prompt_too_long_counts() -> None:
    parsed = parse_prompt_too_long("prompt is too long: 137500 tokens > 135000 maximum")
    assert parsed == PromptTooLong(137_500, 135_000)
    assert parsed.excess_tokens == 2_500


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("Prompt is too long: 1 token > 0 maximum", PromptTooLong(1, 0)),
        (
            '400 {"error":{"message":"prompt is too long: 210000 tokens > 200000 maximum"}}',
            PromptTooLong(210_000, 200_000),
        ),
        ("PROMPT IS TOO LONG (got 5 tokens>4)", PromptTooLong(5, 4)),
        ("prompt is too long", None),
    ],
)
def test_m8_2_prompt_too_long_parsed_leniently(message: str, expected: PromptTooLong | None) -> None:
    assert parse_prompt_too_long(message) == expected
    assert is_prompt_too_long(message)


def test_m7_2_prompt_too_long_detection_is_case_insensitive() -> None:
    assert is_prompt_too_long("Prompt Is Too Long")
    assert not is_prompt_too_long("prompt was fine")


OVERFLOW_400 = "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000, decrease input length"


def test_m4_11_vector_retry_with_available_tokens() -> None:
    overflow = parse_context_overflow(OVERFLOW_400)
    assert overflow == ContextOverflow(188_059, 20_000, 200_000)
    decision = decide_context_overflow(overflow)
    assert decision.action is ContextOverflowAction.RETRY
    assert decision.max_tokens == 10_941


def test_m4_11_vector_give_up_below_floor() -> None:
    overflow = parse_context_overflow("input length and `max_tokens` exceed context limit: 198500 + 8000 > 200000")
    assert overflow is not None
    decision = decide_context_overflow(overflow)
    assert decision.action is ContextOverflowAction.GIVE_UP
    assert decision.available_tokens == 500
    assert decision.max_tokens is None


def test_m4_11_floor_and_thinking_budget() -> None:
    assert decide_context_overflow(ContextOverflow(196_000, 8_000, 200_000)).max_tokens == 3_000
    assert (
        decide_context_overflow(ContextOverflow(188_059, 20_000, 200_000), thinking_budget=16_000).max_tokens == 16_001
    )


def test_m4_11_other_messages_are_not_overflows() -> None:
    assert parse_context_overflow("prompt is too long: 5 tokens > 4 maximum") is None


def test_m4_11_preflight_same_condition() -> None:
    assert preflight_context_overflow(
        input_tokens=190_000, max_tokens=20_000, context_window=200_000
    ) == ContextOverflow(190_000, 20_000, 200_000)
    assert preflight_context_overflow(input_tokens=180_000, max_tokens=20_000, context_window=200_000) is None


def test_m8_1_blocking_limit_example() -> None:
    assert blocking_limit(200_000, 32_000) == 177_000
    assert autocompact_threshold(200_000, 32_000) == 167_000
    assert blocking_limit(200_000, 8_000) == 189_000
    assert is_blocked(177_000, window=200_000, model_max_tokens=32_000)
    assert not is_blocked(176_999, window=200_000, model_max_tokens=32_000)


def test_m8_1_context_window() -> None:
    assert context_window("claude-sonnet-4-5") == 200_000
    assert context_window("claude-sonnet-4-6[1m]") == 1_000_000
    assert context_window("Claude-X", windows={"claude-x": 400_000}) == 400_000


def test_m8_3_m8_4_stop_reasons() -> None:
    assert output_limit_error("max_tokens") is OutputLimitError.MAX_OUTPUT_TOKENS
    assert output_limit_error("model_context_window_exceeded") is OutputLimitError.CONTEXT_WINDOW
    assert output_limit_error("end_turn") is None
    assert output_limit_error(None) is None


def test_m12_max_tokens_three_resumptions_then_give_up() -> None:
    """M12: text-only truncation, gates off → resume with the meta message; after the 3rd the error."""
    state = OutputLimitState()
    actions = []
    for _ in range(4):
        decision = decide_output_limit(OutputLimitError.MAX_OUTPUT_TOKENS, state=state, tool_use_streamed=False)
        actions.append(decision.action)
        state = decision.state
    assert actions == [OutputLimitAction.RESUME] * 3 + [OutputLimitAction.GIVE_UP]
    assert state.recovery_count == 3
    assert OUTPUT_TOKEN_RECOVERY_MESSAGE.startswith("Output token limit hit. Resume directly — no apology")


def test_m8_5_escalate_once_under_capped_default() -> None:
    first = decide_output_limit(
        OutputLimitError.MAX_OUTPUT_TOKENS, state=OutputLimitState(), tool_use_streamed=False, capped_default=True
    )
    assert (first.action, first.max_tokens) == (OutputLimitAction.ESCALATE, 64_000)
    second = decide_output_limit(
        OutputLimitError.MAX_OUTPUT_TOKENS, state=first.state, tool_use_streamed=False, capped_default=True
    )
    assert second.action is OutputLimitAction.RESUME
    assert loop_max_tokens(8_000, state=second.state) == 64_000


def test_m8_5_no_escalation_with_explicit_max_tokens() -> None:
    decision = decide_output_limit(
        OutputLimitError.CONTEXT_WINDOW,
        state=OutputLimitState(),
        tool_use_streamed=False,
        capped_default=True,
        explicit_max_tokens=True,
    )
    assert decision.action is OutputLimitAction.RESUME
    assert decision.error is OutputLimitError.CONTEXT_WINDOW


def test_m8_5_truncated_tool_use_runs_tools_and_resets() -> None:
    state = OutputLimitState(recovery_count=2, max_tokens_override=64_000)
    decision = decide_output_limit(OutputLimitError.MAX_OUTPUT_TOKENS, state=state, tool_use_streamed=True)
    assert decision.action is OutputLimitAction.RUN_TOOLS
    assert decision.state == OutputLimitState()


def test_m1_5_precedence_retry_then_loop_then_default() -> None:
    state = OutputLimitState(max_tokens_override=64_000)
    assert loop_max_tokens(32_000, state=OutputLimitState()) == 32_000
    assert loop_max_tokens(32_000, state=state) == 64_000
    assert loop_max_tokens(32_000, state=state, retry_override=10_941) == 10_941


@given(
    st.integers(min_value=0, max_value=2_000_000),
    st.integers(min_value=1, max_value=200_000),
    st.integers(min_value=1, max_value=2_000_000),
    st.one_of(st.none(), st.integers(min_value=1_024, max_value=100_000)),
)
def test_m4_11_retry_leaves_at_least_the_floor_and_fits_when_it_can(
    input_tokens: int, max_tokens: int, limit: int, budget: int | None
) -> None:
    decision = decide_context_overflow(ContextOverflow(input_tokens, max_tokens, limit), thinking_budget=budget)
    available = max(0, limit - input_tokens - 1_000)
    assert decision.available_tokens == available
    if available < 3_000:
        assert decision.action is ContextOverflowAction.GIVE_UP
        return
    assert decision.action is ContextOverflowAction.RETRY
    assert decision.max_tokens is not None
    assert decision.max_tokens >= available
    assert decision.max_tokens == available or (budget is not None and decision.max_tokens == budget + 1)
