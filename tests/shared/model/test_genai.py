"""M11: OpenTelemetry GenAI span name and attributes, bounded metric labels (M11.3 vector included)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentbus_redis.model.genai import (
    ERROR_TYPES,
    OTHER,
    error_attributes,
    error_type,
    metric_attributes,
    model_label,
    request_attributes,
    response_attributes,
    span_name,
    token_usage_points,
    usage_attributes,
)
from agentbus_redis.model.request import ModelDefaults, build_model_params
from agentbus_redis.model.session_config import SessionModelConfig


def test_m11_1_span_name() -> None:
    assert span_name("claude-sonnet-4-5") == "chat claude-sonnet-4-5"


def test_m11_2_request_attributes_from_built_params() -> None:
    params = build_model_params(
        {"messages": [{"role": "user", "content": "hi"}], "stop_sequences": ["END"]},
        session_id="s1",
        config=SessionModelConfig(thinking={"type": "disabled"}),
        defaults=ModelDefaults(model="claude-sonnet-4-5", temperature=0.5),
        tools=[],
    )
    assert request_attributes(params, conversation_id="s1", server_address="api.anthropic.com", server_port=443) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.conversation.id": "s1",
        "gen_ai.request.max_tokens": 32_000,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.stop_sequences": ["END"],
        "server.address": "api.anthropic.com",
        "server.port": 443,
    }


def test_m11_2_server_port_only_with_address() -> None:
    attributes = request_attributes({"model": "m", "max_tokens": 1}, server_port=443)
    assert "server.port" not in attributes


def test_m11_3_input_tokens_include_cache() -> None:
    """M11.3 vector: input 1 000, cache_read 20 000, cache_creation 5 000 → 26 000."""
    usage = {
        "input_tokens": 1_000,
        "cache_read_input_tokens": 20_000,
        "cache_creation_input_tokens": 5_000,
        "output_tokens": 7,
    }
    assert usage_attributes(usage) == {
        "gen_ai.usage.input_tokens": 26_000,
        "gen_ai.usage.output_tokens": 7,
        "gen_ai.usage.cache_creation.input_tokens": 5_000,
        "gen_ai.usage.cache_read.input_tokens": 20_000,
    }


def test_m11_2_response_attributes() -> None:
    message = {
        "id": "msg_01",
        "model": "claude-sonnet-4-5-20250929",
        "stop_reason": "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 3},
    }
    assert response_attributes(message) == {
        "gen_ai.response.id": "msg_01",
        "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        "gen_ai.response.finish_reasons": ["end_turn"],
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
    }


def test_m11_5_token_points_only_when_known() -> None:
    assert token_usage_points({"input_tokens": 1_000, "cache_read_input_tokens": 20_000, "output_tokens": 5}) == [
        ("input", 21_000),
        ("output", 5),
    ]
    assert token_usage_points({"output_tokens": 5}) == [("output", 5)]
    assert token_usage_points(None) == []


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"status_code": 529, "api_error_type": "overloaded_error"}, "overloaded_error"),
        ({"status_code": 200, "api_error_type": "overloaded_error"}, "overloaded_error"),
        ({"status_code": 429}, "rate_limit_error"),
        ({"status_code": 500, "api_error_type": "something_new"}, "api_error"),
        ({"status_code": 418}, OTHER),
        ({"timeout": True}, "timeout"),
        ({"connection": True}, "connection_error"),
        ({"stream_incomplete": True}, "stream_incomplete"),
        ({}, OTHER),
    ],
)
def test_m11_2_error_type_vocabulary(kwargs: dict[str, object], expected: str) -> None:
    assert error_type(**kwargs) == expected  # type: ignore[arg-type]


@given(st.integers(min_value=100, max_value=599), st.text(max_size=20), st.booleans(), st.booleans())
def test_m11_2_error_type_is_bounded(status: int, api_type: str, timeout: bool, connection: bool) -> None:
    assert (
        error_type(status_code=status, api_error_type=api_type, timeout=timeout, connection=connection) in ERROR_TYPES
    )


def test_m11_2_error_attributes_bounded() -> None:
    assert error_attributes("overloaded_error") == {"error.type": "overloaded_error"}
    assert error_attributes("whatever") == {"error.type": OTHER}


def test_m11_5_model_label_bounded() -> None:
    assert model_label("claude-sonnet-4-5-20250929") == "claude-sonnet-4-5"
    assert model_label("claude-sonnet-4@20250514") == "claude-sonnet-4"
    assert model_label("my-finetune-123") == OTHER
    assert model_label("my-model", known={"my-model"}) == "my-model"
    assert model_label(None) == OTHER


@given(st.text(max_size=30))
def test_m11_5_model_label_never_unbounded(model: str) -> None:
    label = model_label(model)
    assert label == OTHER or label.startswith("claude-")


def test_m11_6_metric_attributes() -> None:
    assert metric_attributes(request_model="claude-opus-4-6", response_model="x", error="overloaded_error") == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-opus-4-6",
        "gen_ai.response.model": OTHER,
        "error.type": "overloaded_error",
    }
