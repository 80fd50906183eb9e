"""The Messages API body as ``AsyncAnthropic().messages.create`` keyword arguments (agent-loop.md M1.1).

The SDK (anthropic 2.13) takes the body fields it knows as keyword arguments and rejects any other
keyword; every other field has to go in ``extra_body``, which the SDK merges into the JSON body. It has
no ``temperature``, ``top_k`` or ``top_p`` keyword, so those go there too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from agentbus_redis.json_types import JsonObject, JsonValue

CREATE_KEYWORDS: Final = frozenset(
    {
        "max_tokens",
        "messages",
        "model",
        "cache_control",
        "container",
        "inference_geo",
        "metadata",
        "output_config",
        "service_tier",
        "speed",
        "stop_sequences",
        "system",
        "thinking",
        "tool_choice",
        "tools",
    }
)
"""Body fields ``AsyncMessages.create`` takes as keyword arguments (anthropic 2.13; ``stream`` is the
worker's)."""
SDK_OPTIONS: Final = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})
"""Keyword arguments of ``create`` that are request options, not body fields."""
M1_1_ORDER: Final = (
    "model",
    "messages",
    "system",
    "tools",
    "tool_choice",
    "betas",
    "metadata",
    "max_tokens",
    "thinking",
    "temperature",
    "context_management",
    "output_config",
    "speed",
)


def request_body(params: Mapping[str, JsonValue]) -> JsonObject:
    """The JSON body ``params`` sends: its body keywords with ``extra_body`` merged in (SDK options
    such as ``timeout`` left out)."""
    body: JsonObject = {key: value for key, value in params.items() if key not in SDK_OPTIONS}
    extra = params.get("extra_body")
    if isinstance(extra, Mapping):
        body.update(extra)
    return body


def sdk_params(body: Mapping[str, JsonValue], options: Mapping[str, JsonValue] | None = None) -> JsonObject:
    """``create`` keyword arguments sending ``body``: M1.1's order, then the other fields; fields that
    are not keywords of ``create`` go into ``extra_body`` (the SDK rejects unknown keywords and merges
    ``extra_body`` into the body). ``options`` (``timeout``, ``extra_headers`` …) are kept."""
    ordered = [key for key in M1_1_ORDER if key in body] + [key for key in body if key not in M1_1_ORDER]
    result: JsonObject = {}
    extra_body: JsonObject = {}
    for key in ordered:
        if key in CREATE_KEYWORDS:
            result[key] = body[key]
        elif key != "stream":
            extra_body[key] = body[key]
    for key, value in (options or {}).items():
        if key != "extra_body":
            result[key] = value
    if extra_body:
        result["extra_body"] = extra_body
    return result


def options_of(params: Mapping[str, JsonValue]) -> JsonObject:
    """The request options of ``params`` (``timeout``, ``extra_headers``, ``extra_query``)."""
    return {key: value for key, value in params.items() if key in SDK_OPTIONS and key != "extra_body"}


__all__ = ["CREATE_KEYWORDS", "M1_1_ORDER", "SDK_OPTIONS", "options_of", "request_body", "sdk_params"]
