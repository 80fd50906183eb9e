"""Metrics of the model workers, named for the OpenTelemetry GenAI client instruments (agent-loop.md M11.5,
M11.6) in Prometheus form (dots become underscores, the unit a suffix), plus the worker's own counters.

Like every ``agentbus_*`` family these honour ``AGENTBUS_METRICS`` (``metrics.set_recording``): off, every
``record_*`` here returns at once.

Labels are bounded (``model/genai.py``): a model is its canonical id when known, else ``_OTHER``;
``error_type`` comes from a fixed vocabulary (the API's error types, ``timeout``, ``connection_error``, …);
operation is ``chat``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal

from prometheus_client import Counter, Gauge, Histogram

from agentbus_redis.json_types import JsonValue
from agentbus_redis.model.genai import (
    OPERATION_CHAT,
    OPERATION_DURATION_BUCKETS,
    PROVIDER_NAME,
    TOKEN_USAGE_BUCKETS,
    model_label,
    token_usage_points,
)
from agentbus_redis.observability.switch import recording

FIRST_CHUNK_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24)

TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "Tokens used per model call (OTel gen_ai.client.token.usage; input = input + cache read + cache creation, M11.3).",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_token_type", "gen_ai_request_model"],
    buckets=TOKEN_USAGE_BUCKETS,
)
OPERATION_DURATION = Histogram(
    "gen_ai_client_operation_duration_seconds",
    "Duration of a logical model call, retries and fallbacks included (OTel gen_ai.client.operation.duration).",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"],
    buckets=OPERATION_DURATION_BUCKETS,
)
TIME_TO_FIRST_CHUNK = Histogram(
    "gen_ai_client_operation_time_to_first_chunk_seconds",
    "From sending the request to the first stream event (OTel gen_ai.client.operation.time_to_first_chunk).",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"],
    buckets=FIRST_CHUNK_BUCKETS,
)
CALLS = Counter(
    "agentbus_model_calls_total",
    "Logical model calls by how they ended.",
    ["model", "outcome"],
)
RETRIES = Counter(
    "agentbus_model_retries_total",
    "Attempts retried after an API error (M4), by error type.",
    ["model", "error_type"],
)
FALLBACKS = Counter(
    "agentbus_model_fallbacks_total",
    "Fallbacks: kind=nonstreaming (a broken stream, M5) or kind=model (three 529s, M6).",
    ["model", "kind"],
)
IN_FLIGHT = Gauge("agentbus_model_calls_in_flight", "Model calls this worker is making now.")
COST = Counter("agentbus_model_cost_usd_total", "Cost of the model calls (M10), US dollars.", ["model"])
INTERRUPT_ABORT = Histogram(
    "agentbus_model_interrupt_abort_seconds",
    "From the interrupt reaching the worker to the stream in flight being closed.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)

DEFINED: Final = (
    TOKEN_USAGE,
    OPERATION_DURATION,
    TIME_TO_FIRST_CHUNK,
    CALLS,
    RETRIES,
    FALLBACKS,
    IN_FLIGHT,
    COST,
    INTERRUPT_ABORT,
)
"""Every metric of this module (``metrics.metric_families`` lists them with the rest)."""

CallOutcome = Literal[
    "ok",
    "api_error",
    "interrupted",
    "superseded",
    "already_answered",
    "blocked",
    "lease_lost",
    "max_turns",
    "abandoned",
]


def record_tokens(model: str, usage: Mapping[str, JsonValue]) -> None:
    """M11.5: one ``input`` point (input + cache read + cache creation, M11.3) and one ``output`` point; nothing
    for a count that is unavailable."""
    if not recording():
        return
    label = model_label(model)
    for token_type, count in token_usage_points(usage):
        TOKEN_USAGE.labels(OPERATION_CHAT, PROVIDER_NAME, token_type, label).observe(count)


def record_duration(model: str, seconds: float, error_type: str | None) -> None:
    if not recording():
        return
    OPERATION_DURATION.labels(OPERATION_CHAT, PROVIDER_NAME, model_label(model), error_type or "").observe(seconds)


def record_first_chunk(model: str, seconds: float) -> None:
    if not recording():
        return
    TIME_TO_FIRST_CHUNK.labels(OPERATION_CHAT, PROVIDER_NAME, model_label(model)).observe(seconds)


def record_call(model: str, outcome: CallOutcome) -> None:
    if not recording():
        return
    CALLS.labels(model_label(model), outcome).inc()


def record_retry(model: str, error_type: str) -> None:
    if not recording():
        return
    RETRIES.labels(model_label(model), error_type).inc()


def record_fallback(model: str, kind: Literal["nonstreaming", "model"]) -> None:
    if not recording():
        return
    FALLBACKS.labels(model_label(model), kind).inc()


def record_cost(model: str, usd: float) -> None:
    if not recording():
        return
    COST.labels(model_label(model)).inc(max(usd, 0.0))


def call_started() -> None:
    if recording():
        IN_FLIGHT.inc()


def call_ended() -> None:
    if recording():
        IN_FLIGHT.dec()


def record_interrupt_abort(seconds: float) -> None:
    if recording():
        INTERRUPT_ABORT.observe(seconds)
