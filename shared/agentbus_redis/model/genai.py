"""OpenTelemetry GenAI semantic conventions for the model call (agent-loop.md M11), as pure functions
from the request params and the final message (or error) to span attributes and bounded metric labels.

We are new, so the latest names are used (M11.7): ``gen_ai.provider.name``, not ``gen_ai.system``.
Opt-in content attributes (``gen_ai.input.messages`` …, M11.2) are never produced here: they may hold
PII and are off by default.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Final, TypeAlias

from agentbus_redis.json_types import JsonValue
from agentbus_redis.model.limits.max_tokens import undated_model_id
from agentbus_redis.model.sdk_params import request_body

AttributeValue: TypeAlias = str | bool | int | float | list[str]
Attributes: TypeAlias = dict[str, AttributeValue]

OPERATION_CHAT: Final = "chat"
"""M11.2: ``gen_ai.operation.name`` of a Messages API call."""
PROVIDER_NAME: Final = "anthropic"
"""M11.1: ``gen_ai.provider.name`` MUST be ``anthropic``."""
SPAN_KIND: Final = "CLIENT"
"""M11.1: the inference span's kind."""
OTHER: Final = "_OTHER"
"""OTel's fallback value for a label outside the known set."""

TOKEN_USAGE_BUCKETS: Final = (
    1,
    4,
    16,
    64,
    256,
    1_024,
    4_096,
    16_384,
    65_536,
    262_144,
    1_048_576,
    4_194_304,
    16_777_216,
    67_108_864,
)
"""M11.5: ``gen_ai.client.token.usage`` explicit bucket boundaries ({token})."""
OPERATION_DURATION_BUCKETS: Final = (
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
)
"""M11.6: ``gen_ai.client.operation.duration`` bucket boundaries (s); also fit for time to first chunk."""

API_ERROR_TYPES: Final = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "billing_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "timeout_error",
        "api_error",
        "overloaded_error",
    }
)
"""M3.1: the API's ``error.type`` values (plus ``billing_error`` / ``timeout_error`` the docs also list)."""
STATUS_ERROR_TYPES: Final[Mapping[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
"""M3.1: the error type a status means when the body names none (or an unknown one)."""
TIMEOUT: Final = "timeout"
CONNECTION_ERROR: Final = "connection_error"
STREAM_INCOMPLETE: Final = "stream_incomplete"
"""M2.5: the stream ended without a message or without any block and stop reason."""
ERROR_TYPES: Final = API_ERROR_TYPES | {TIMEOUT, CONNECTION_ERROR, STREAM_INCOMPLETE, OTHER}
"""Every value :func:`error_type` returns: a bounded ``error.type`` label."""

KNOWN_MODEL_LABELS: Final = frozenset(
    {
        "claude-opus-5",
        "claude-sonnet-5",
        "claude-opus-4-8",
        "claude-opus-4-7",
        "claude-opus-4-6",
        "claude-sonnet-4-6",
        "claude-opus-4-5",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "claude-opus-4-1",
        "claude-opus-4",
        "claude-sonnet-4",
        "claude-3-7-sonnet",
        "claude-3-5-sonnet",
        "claude-3-5-haiku",
        "claude-3-opus",
        "claude-3-haiku",
    }
)
"""Model labels metrics may carry (canonical ids, M10.3's models); anything else is ``_OTHER`` unless
the worker adds its configured models."""


def span_name(model: str, operation: str = OPERATION_CHAT) -> str:
    """M11.1: ``{gen_ai.operation.name} {gen_ai.request.model}``, e.g. ``chat claude-sonnet-4-5``."""
    return f"{operation} {model}"


def _int(value: JsonValue | None) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _number(value: JsonValue | None) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def request_attributes(
    params: Mapping[str, JsonValue],
    *,
    conversation_id: str | None = None,
    server_address: str | None = None,
    server_port: int | None = None,
) -> Attributes:
    """M11.2 attributes known when the call starts (set at span creation): operation, provider,
    request model, conversation id (our session id), ``max_tokens``, ``temperature``/``top_p``/
    ``top_k``/``stop_sequences`` when sent, ``server.address`` and — only with it — ``server.port``."""
    body = request_body(params)
    attributes: Attributes = {"gen_ai.operation.name": OPERATION_CHAT, "gen_ai.provider.name": PROVIDER_NAME}
    model = body.get("model")
    if isinstance(model, str):
        attributes["gen_ai.request.model"] = model
    if conversation_id:
        attributes["gen_ai.conversation.id"] = conversation_id
    if (max_tokens := _int(body.get("max_tokens"))) is not None:
        attributes["gen_ai.request.max_tokens"] = max_tokens
    for key in ("temperature", "top_p"):
        if (number := _number(body.get(key))) is not None:
            attributes[f"gen_ai.request.{key}"] = number
    if (top_k := _int(body.get("top_k"))) is not None:
        attributes["gen_ai.request.top_k"] = top_k
    stop = body.get("stop_sequences")
    if isinstance(stop, list) and stop and all(isinstance(item, str) for item in stop):
        attributes["gen_ai.request.stop_sequences"] = [item for item in stop if isinstance(item, str)]
    if server_address:
        attributes["server.address"] = server_address
        if server_port is not None:
            attributes["server.port"] = server_port
    return attributes


def usage_attributes(usage: Mapping[str, JsonValue] | None) -> Attributes:
    """M11.2/M11.3: token counts of a merged usage object. ``gen_ai.usage.input_tokens`` = input +
    cache read + cache creation (Anthropic's ``input_tokens`` excludes cached tokens); the cache
    attributes carry the raw counts. A count the usage lacks is left out."""
    if not usage:
        return {}
    attributes: Attributes = {}
    input_tokens = _int(usage.get("input_tokens"))
    cache_read = _int(usage.get("cache_read_input_tokens"))
    cache_creation = _int(usage.get("cache_creation_input_tokens"))
    if input_tokens is not None:
        attributes["gen_ai.usage.input_tokens"] = input_tokens + (cache_read or 0) + (cache_creation or 0)
    if (output_tokens := _int(usage.get("output_tokens"))) is not None:
        attributes["gen_ai.usage.output_tokens"] = output_tokens
    if cache_creation is not None:
        attributes["gen_ai.usage.cache_creation.input_tokens"] = cache_creation
    if cache_read is not None:
        attributes["gen_ai.usage.cache_read.input_tokens"] = cache_read
    return attributes


def response_attributes(message: Mapping[str, JsonValue]) -> Attributes:
    """M11.2 attributes of the final Message (streamed and accumulated, or non-streaming):
    ``gen_ai.response.id`` (``msg_…``), ``gen_ai.response.model``, ``gen_ai.response.finish_reasons``
    (``[stop_reason]``) and the usage attributes."""
    attributes: Attributes = {}
    if isinstance(message_id := message.get("id"), str):
        attributes["gen_ai.response.id"] = message_id
    if isinstance(model := message.get("model"), str):
        attributes["gen_ai.response.model"] = model
    if isinstance(stop_reason := message.get("stop_reason"), str):
        attributes["gen_ai.response.finish_reasons"] = [stop_reason]
    usage = message.get("usage")
    attributes.update(usage_attributes(usage if isinstance(usage, Mapping) else None))
    return attributes


def error_type(
    *,
    status_code: int | None = None,
    api_error_type: str | None = None,
    timeout: bool = False,
    connection: bool = False,
    stream_incomplete: bool = False,
) -> str:
    """M11.2 ``error.type`` from a bounded vocabulary (:data:`ERROR_TYPES`): the API's error type (the
    body's ``error.type``, also of a mid-stream ``error`` event with status 200, M2.3), else the type
    the status means (M3.1), else ``timeout`` / ``connection_error`` / ``stream_incomplete``, else
    ``_OTHER``."""
    if api_error_type is not None and api_error_type in API_ERROR_TYPES:
        return api_error_type
    if status_code is not None and status_code in STATUS_ERROR_TYPES:
        return STATUS_ERROR_TYPES[status_code]
    if timeout:
        return TIMEOUT
    if connection:
        return CONNECTION_ERROR
    if stream_incomplete:
        return STREAM_INCOMPLETE
    return OTHER


def error_attributes(error: str) -> Attributes:
    """M11.2/M11.4: ``error.type``, set only when the logical call finally failed."""
    return {"error.type": error if error in ERROR_TYPES else OTHER}


def model_label(model: str | None, known: Collection[str] = KNOWN_MODEL_LABELS) -> str:
    """A bounded metric label for a model: its canonical id when known, else ``_OTHER`` (a session can
    name any model; labels must not grow with them)."""
    if not model:
        return OTHER
    canonical = undated_model_id(model)
    return canonical if canonical in known else OTHER


def metric_attributes(
    *,
    request_model: str | None,
    response_model: str | None = None,
    error: str | None = None,
    server_address: str | None = None,
    server_port: int | None = None,
    known_models: Collection[str] = KNOWN_MODEL_LABELS,
) -> Attributes:
    """M11.5/M11.6 metric attributes, every value bounded: operation, provider, request/response model
    (via :func:`model_label`), ``error.type`` when the call failed, server address/port."""
    attributes: Attributes = {
        "gen_ai.operation.name": OPERATION_CHAT,
        "gen_ai.provider.name": PROVIDER_NAME,
        "gen_ai.request.model": model_label(request_model, known_models),
    }
    if response_model is not None:
        attributes["gen_ai.response.model"] = model_label(response_model, known_models)
    if error is not None:
        attributes["error.type"] = error if error in ERROR_TYPES else OTHER
    if server_address:
        attributes["server.address"] = server_address
        if server_port is not None:
            attributes["server.port"] = server_port
    return attributes


def token_usage_points(usage: Mapping[str, JsonValue] | None) -> list[tuple[str, int]]:
    """M11.5: the ``gen_ai.client.token.usage`` points of one call — ``("input", M11.3 total)`` and
    ``("output", n)`` — each only when its count is known (MUST NOT be reported otherwise)."""
    attributes = usage_attributes(usage)
    points: list[tuple[str, int]] = []
    for token_type in ("input", "output"):
        value = attributes.get(f"gen_ai.usage.{token_type}_tokens")
        if isinstance(value, int):
            points.append((token_type, value))
    return points


__all__ = [
    "API_ERROR_TYPES",
    "CONNECTION_ERROR",
    "ERROR_TYPES",
    "KNOWN_MODEL_LABELS",
    "OPERATION_CHAT",
    "OPERATION_DURATION_BUCKETS",
    "OTHER",
    "PROVIDER_NAME",
    "SPAN_KIND",
    "STATUS_ERROR_TYPES",
    "STREAM_INCOMPLETE",
    "TIMEOUT",
    "TOKEN_USAGE_BUCKETS",
    "AttributeValue",
    "Attributes",
    "error_attributes",
    "error_type",
    "metric_attributes",
    "model_label",
    "request_attributes",
    "response_attributes",
    "span_name",
    "token_usage_points",
    "usage_attributes",
]
