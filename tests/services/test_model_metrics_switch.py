"""``AGENTBUS_METRICS=false`` turns the model worker's metrics off too (like every other worker's): each
``model_metrics`` recorder is a no-op while recording is off."""

from __future__ import annotations

from prometheus_client import REGISTRY

from agentbus_redis.observability import metrics, model_metrics

MODEL = "claude-sonnet-4-6"


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


def record_everything() -> None:
    model_metrics.record_call(MODEL, "ok")
    model_metrics.record_retry(MODEL, "overloaded_error")
    model_metrics.record_fallback(MODEL, "nonstreaming")
    model_metrics.record_cost(MODEL, 0.5)
    model_metrics.record_tokens(MODEL, {"input_tokens": 10, "output_tokens": 5})
    model_metrics.record_duration(MODEL, 0.2, None)
    model_metrics.record_first_chunk(MODEL, 0.01)
    model_metrics.record_interrupt_abort(0.001)
    model_metrics.call_started()


def snapshot() -> dict[str, float]:
    chat = {"gen_ai_operation_name": "chat", "gen_ai_provider_name": "anthropic", "gen_ai_request_model": MODEL}
    return {
        "calls": sample("agentbus_model_calls_total", model=MODEL, outcome="ok"),
        "retries": sample("agentbus_model_retries_total", model=MODEL, error_type="overloaded_error"),
        "fallbacks": sample("agentbus_model_fallbacks_total", model=MODEL, kind="nonstreaming"),
        "cost": sample("agentbus_model_cost_usd_total", model=MODEL),
        "tokens": sample("gen_ai_client_token_usage_count", **chat, gen_ai_token_type="input"),
        "duration": sample("gen_ai_client_operation_duration_seconds_count", **chat, error_type=""),
        "first_chunk": sample("gen_ai_client_operation_time_to_first_chunk_seconds_count", **chat),
        "abort": sample("agentbus_model_interrupt_abort_seconds_count"),
        "in_flight": sample("agentbus_model_calls_in_flight"),
    }


def test_model_metrics_honour_the_metrics_switch() -> None:
    before = snapshot()
    metrics.set_recording(False)
    try:
        record_everything()
        assert snapshot() == before
    finally:
        metrics.set_recording(True)
    record_everything()
    model_metrics.call_ended()
    after = snapshot()
    changed = {name for name in before if after[name] != before[name]}
    assert changed == set(before) - {"in_flight"}  # the gauge went up and down again
