"""M4 retry policy and M7 error texts (model/retry.py, model/error_texts.py)."""

from __future__ import annotations

import pytest

from agentbus_redis.model.error_texts import assistant_error_for, model_not_found, sdk_error_message
from agentbus_redis.model.retry import (
    ApiFailure,
    GiveUp,
    Retry,
    RetryPolicy,
    RetryState,
    SwitchModel,
    backoff_ms,
    backoff_window_ms,
    context_overflow_max_tokens,
    decide,
    retry_after_ms,
    retry_category,
    should_retry,
)


def _body(error_type: str, message: str) -> dict[str, object]:
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": "req_1"}


def _failure(status: int | None, error_type: str = "api_error", message: str = "boom", **headers: str) -> ApiFailure:
    return ApiFailure(
        status=status,
        error_type=error_type,
        message=message,
        body=_body(error_type, message),
        headers={k.replace("_", "-"): v for k, v in headers.items()},
    )


@pytest.mark.parametrize(
    ("attempt", "low", "high"),
    [(1, 500, 625), (2, 1000, 1250), (3, 2000, 2500), (6, 16_000, 20_000), (7, 32_000, 40_000), (11, 32_000, 40_000)],
)
def test_m4_3_backoff_vectors(attempt: int, low: float, high: float) -> None:
    assert backoff_ms(attempt, {}, jitter=0.0) == low
    assert low <= backoff_ms(attempt, {}, jitter=0.999) < high
    assert backoff_window_ms(attempt) == (low, high)


def test_m4_3_backoff_scales_with_the_configured_base() -> None:
    assert backoff_window_ms(3, base_ms=5, max_ms=320) == (20, 25)
    assert backoff_window_ms(9, base_ms=5, max_ms=320) == (320, 400)


@pytest.mark.parametrize(("value", "ms"), [("7", 7000), ("7.5", 7000), (" 2", 2000), ("0", 0)])
def test_m4_3_retry_after_leading_digits_are_seconds(value: str, ms: float) -> None:
    assert retry_after_ms({"retry-after": value}) == ms
    assert backoff_ms(9, {"retry-after": value}, jitter=0.9) == ms  # no cap, no jitter


def test_m4_3_retry_after_http_date_does_not_parse() -> None:
    assert retry_after_ms({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None


def test_m3_3_retry_after_ms_when_retry_after_is_absent() -> None:
    assert retry_after_ms({"retry-after-ms": "250"}) == 250
    assert retry_after_ms({"retry-after-ms": "0"}) is None
    assert retry_after_ms({"retry-after": "1", "retry-after-ms": "250"}) == 1000


@pytest.mark.parametrize(
    ("failure", "expected"),
    [
        (_failure(429, "rate_limit_error"), True),
        (_failure(529, "overloaded_error"), True),
        (_failure(200, "overloaded_error"), True),  # mid-stream overload (M4.12)
        (_failure(500), True),
        (_failure(503), True),
        (_failure(408), True),
        (_failure(409), True),
        (_failure(401, "authentication_error"), True),
        (_failure(400, "invalid_request_error"), False),
        (_failure(403, "permission_error"), False),
        (_failure(404, "not_found_error"), False),
        (_failure(413, "request_too_large"), False),
        (_failure(422), False),
        (_failure(500, x_should_retry="false"), False),
        (_failure(400, "invalid_request_error", x_should_retry="true"), True),
        (ApiFailure(status=None, message="Connection error.", connection=True), True),
        (ApiFailure(status=None, message="Request timed out.", connection=True, timeout=True), True),
    ],
)
def test_m4_6_should_retry(failure: ApiFailure, expected: bool) -> None:
    assert should_retry(failure) is expected


def test_m4_6_context_overflow_400_retries() -> None:
    failure = _failure(400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 1 + 2 > 3")
    assert should_retry(failure)


def test_m4_11_context_overflow_vectors() -> None:
    ok = _failure(
        400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"
    )
    assert context_overflow_max_tokens(ok, thinking_budget=None) == 10_941
    assert context_overflow_max_tokens(ok, thinking_budget=15_000) == 15_001
    low = _failure(
        400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 198500 + 8000 > 200000"
    )
    assert context_overflow_max_tokens(low, thinking_budget=None) is None


def _decide(failure: ApiFailure, state: RetryState, fallback: str | None = None, model: str = "claude-sonnet-4-5"):  # type: ignore[no-untyped-def]
    state.attempt += 1
    return decide(failure, state, policy=RetryPolicy(), model=model, fallback_model=fallback, jitter=0.5)


def test_m4_2_eleven_attempts_then_give_up() -> None:
    state = RetryState()
    decisions = [_decide(_failure(500), state) for _ in range(11)]
    assert all(isinstance(d, Retry) for d in decisions[:10])
    assert decisions[10] == GiveUp("exhausted", _failure(500))


def test_m4_5_not_retryable_gives_up_at_once() -> None:
    assert isinstance(_decide(_failure(400, "invalid_request_error"), RetryState()), GiveUp)


def test_m4_5_context_overflow_retries_immediately_without_notice() -> None:
    state = RetryState()
    failure = _failure(
        400, "invalid_request_error", "input length and `max_tokens` exceed context limit: 188059 + 20000 > 200000"
    )
    assert _decide(failure, state) == Retry(0.0, notify=False)
    assert state.max_tokens_override == 10_941


def test_m4_5_3_three_overloads_switch_to_the_fallback_model() -> None:
    state = RetryState()
    overloaded = _failure(529, "overloaded_error", "Overloaded")
    assert isinstance(_decide(overloaded, state, "claude-haiku-4-5"), Retry)
    assert isinstance(_decide(overloaded, state, "claude-haiku-4-5"), Retry)
    assert _decide(overloaded, state, "claude-haiku-4-5") == SwitchModel("claude-sonnet-4-5", "claude-haiku-4-5")


def test_m4_9_non_streaming_fallback_starts_with_the_counter_at_one() -> None:
    state = RetryState(consecutive_529=1)
    overloaded = _failure(529, "overloaded_error", "Overloaded")
    assert isinstance(_decide(overloaded, state, "claude-haiku-4-5"), Retry)
    assert isinstance(_decide(overloaded, state, "claude-haiku-4-5"), SwitchModel)


def test_m6_4_three_overloads_without_fallback_fail_with_repeated_529() -> None:
    state = RetryState()
    overloaded = _failure(529, "overloaded_error", "Overloaded")
    outcomes = [_decide(overloaded, state) for _ in range(3)]
    assert isinstance(outcomes[2], GiveUp)
    assert outcomes[2].reason == "repeated_529"
    assert assistant_error_for(outcomes[2], model="m").text == "API Error: Repeated 529 Overloaded errors"


def test_m6_2_non_opus_without_fallback_for_all_models_just_retries() -> None:
    state = RetryState()
    policy = RetryPolicy(fallback_for_all_models=False)
    overloaded = _failure(529, "overloaded_error", "Overloaded")
    for _ in range(5):
        state.attempt += 1
        decision = decide(overloaded, state, policy=policy, model="claude-sonnet-4-5", fallback_model="x", jitter=0)
        assert isinstance(decision, Retry)


def test_m4_4_retry_categories() -> None:
    assert retry_category(_failure(429, "rate_limit_error")) == "rate_limit"
    assert retry_category(_failure(529, "overloaded_error")) == "rate_limit"
    assert retry_category(_failure(401, "authentication_error")) == "authentication_failed"
    assert retry_category(_failure(500)) == "server_error"
    assert retry_category(ApiFailure(status=None, connection=True)) == "unknown"


def test_m7_2_sdk_error_message_is_status_and_compact_json() -> None:
    failure = _failure(500, "api_error", "Internal server error")
    assert sdk_error_message(failure) == (
        '500 {"type":"error","error":{"type":"api_error","message":"Internal server error"},"request_id":"req_1"}'
    )
    assert (
        assistant_error_for(GiveUp("exhausted", failure), model="m").text == f"API Error: {sdk_error_message(failure)}"
    )


@pytest.mark.parametrize(
    ("failure", "text", "category"),
    [
        (
            ApiFailure(status=None, message="Request timed out.", connection=True, timeout=True),
            "Request timed out",
            "unknown",
        ),
        (
            _failure(400, "invalid_request_error", "prompt is too long: 137500 tokens > 135000 maximum"),
            "Prompt is too long",
            "invalid_request",
        ),
        (
            _failure(413, "request_too_large", "Request exceeds the maximum size"),
            "Request too large (max 20MB). Try with a smaller file.",
            "invalid_request",
        ),
        (
            _failure(
                400,
                "invalid_request_error",
                "messages.3: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1",
            ),
            "API Error: 400 due to tool use concurrency issues.",
            "invalid_request",
        ),
        (
            _failure(400, "invalid_request_error", "Your credit balance is too low to access the API"),
            "Credit balance is too low",
            "billing_error",
        ),
        (
            _failure(401, "authentication_error", "invalid x-api-key"),
            "Invalid API key · Fix external API key",
            "authentication_failed",
        ),
        (
            ApiFailure(status=None, message="Connection error.", connection=True),
            "API Error: Connection error.",
            "unknown",
        ),
    ],
)
def test_m7_2_texts(failure: ApiFailure, text: str, category: str) -> None:
    error = assistant_error_for(GiveUp("not_retryable", failure), model="claude-x")
    assert (error.text, error.error) == (text, category)


def test_m7_2_other_auth_failure_and_404() -> None:
    denied = _failure(403, "permission_error", "no access")
    assert assistant_error_for(GiveUp("not_retryable", denied), model="m").text == (
        f"Failed to authenticate. API Error: {sdk_error_message(denied)}"
    )
    missing = _failure(404, "not_found_error", "model: nope")
    assert assistant_error_for(GiveUp("not_retryable", missing), model="nope").text == model_not_found("nope")
    assert model_not_found("nope") == (
        "There's an issue with the selected model (nope). It may not exist or you may not have access to it. "
        "Run --model to pick a different model."
    )
