"""Metrics of the model workers, named for the OpenTelemetry GenAI client instruments (agent-loop.md M11.5,
M11.6) in Prometheus form (dots become underscores, the unit a suffix), plus the worker's own counters.

Labels are bounded: the model ids come from configuration (a session may name another model, so ids are
allowlisted by :func:`model_label` up to :data:`MAX_MODELS`, then ``other``), ``error_type`` is the provider's
error type or a status class (:func:`services.model.failures.error_type_label`), operation is ``chat``.
"""

from __future__ import annotations

from typing import Final, Literal

from prometheus_client import Counter, Gauge, Histogram

from services.observability.labels import OTHER

PROVIDER: Final = "anthropic"
OPERATION: Final = "chat"
MAX_MODELS: Final = 16

TOKEN_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1024,
    4096,
    16384,
    65536,
    262144,
    1048576,
    4194304,
    16777216,
    67108864,
)
"""M11.5 explicit buckets."""
DURATION_BUCKETS: Final = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""M11.6 explicit buckets (seconds)."""
FIRST_CHUNK_BUCKETS: Final = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24)

TOKEN_USAGE = Histogram(
    "gen_ai_client_token_usage",
    "Tokens used per model call (OTel gen_ai.client.token.usage; input = input + cache read + cache creation, M11.3).",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_token_type", "gen_ai_request_model"],
    buckets=TOKEN_BUCKETS,
)
OPERATION_DURATION = Histogram(
    "gen_ai_client_operation_duration_seconds",
    "Duration of a logical model call, retries and fallbacks included (OTel gen_ai.client.operation.duration).",
    ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model", "error_type"],
    buckets=DURATION_BUCKETS,
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
BUCKET_WAIT = Histogram(
    "agentbus_model_token_bucket_wait_seconds",
    "Time a call waited for its tenant's token bucket (requests/min and tokens/min).",
    buckets=(0.0, 0.001, 0.01, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
INTERRUPT_ABORT = Histogram(
    "agentbus_model_interrupt_abort_seconds",
    "From the interrupt reaching the worker to the stream in flight being closed.",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25),
)

CallOutcome = Literal["ok", "api_error", "interrupted", "superseded", "already_answered"]

_known_models: set[str] = set()


def model_label(model: str) -> str:
    """``model`` as a label value: the first :data:`MAX_MODELS` distinct ids, then ``other``."""
    if model in _known_models:
        return model
    if len(_known_models) < MAX_MODELS:
        _known_models.add(model)
        return model
    return OTHER


def record_tokens(model: str, usage: dict[str, object]) -> None:
    """M11.5: one ``input`` point (input + cache read + cache creation, M11.3) and one ``output`` point; nothing
    when the counts are unavailable."""
    label = model_label(model)
    input_tokens = _count(usage, "input_tokens")
    output_tokens = _count(usage, "output_tokens")
    if input_tokens is None or output_tokens is None:
        return
    total_input = (
        input_tokens
        + (_count(usage, "cache_read_input_tokens") or 0)
        + (_count(usage, "cache_creation_input_tokens") or 0)
    )
    TOKEN_USAGE.labels(OPERATION, PROVIDER, "input", label).observe(total_input)
    TOKEN_USAGE.labels(OPERATION, PROVIDER, "output", label).observe(output_tokens)


def _count(usage: dict[str, object], name: str) -> int | None:
    value = usage.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def record_duration(model: str, seconds: float, error_type: str | None) -> None:
    OPERATION_DURATION.labels(OPERATION, PROVIDER, model_label(model), error_type or "").observe(seconds)


def record_first_chunk(model: str, seconds: float) -> None:
    TIME_TO_FIRST_CHUNK.labels(OPERATION, PROVIDER, model_label(model)).observe(seconds)


def record_call(model: str, outcome: CallOutcome) -> None:
    CALLS.labels(model_label(model), outcome).inc()


def record_retry(model: str, error_type: str) -> None:
    RETRIES.labels(model_label(model), error_type).inc()


def record_fallback(model: str, kind: Literal["nonstreaming", "model"]) -> None:
    FALLBACKS.labels(model_label(model), kind).inc()


def record_cost(model: str, usd: float) -> None:
    COST.labels(model_label(model)).inc(max(usd, 0.0))
