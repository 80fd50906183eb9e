"""Usage accumulation over one streamed response (R9.1, R9.5: "accumulate usage").

The Messages API streams *cumulative* usage: ``message_start`` carries the input side, each
``message_delta`` the totals so far. So accumulating means overwriting, not summing. The exact merge
(which fields may be overwritten, which stay from the start) is not in the spec; it follows Claude
Code v2.1.88 (api/claude.ts ``updateUsage`` and api/emptyUsage.ts ``EMPTY_USAGE``), so the usage
written onto the last block message matches what Claude Code persists.
"""

from __future__ import annotations

from collections.abc import Mapping

from agentbus_redis.json_types import JsonObject, JsonValue

EMPTY_USAGE: JsonObject = {
    "input_tokens": 0,
    "cache_creation_input_tokens": 0,
    "cache_read_input_tokens": 0,
    "output_tokens": 0,
    "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
    "service_tier": "standard",
    "cache_creation": {"ephemeral_1h_input_tokens": 0, "ephemeral_5m_input_tokens": 0},
    "inference_geo": "",
    "iterations": [],
    "speed": "standard",
}
"""The zero usage an accumulation starts from (never mutate; :func:`update_usage` returns new dicts)."""


def _field(source: JsonValue, key: str) -> JsonValue:
    """``source?.key``: None when ``source`` is not an object or lacks ``key``."""
    return source.get(key) if isinstance(source, dict) else None


def _positive_or(new: JsonValue, old: JsonValue) -> JsonValue:
    """Input-side counters: a delta's explicit 0 must not erase the value from message_start."""
    is_number = isinstance(new, int | float) and not isinstance(new, bool)
    return new if is_number and new > 0 else old  # type: ignore[operator]


def _present_or(new: JsonValue, old: JsonValue) -> JsonValue:
    """``new ?? old``."""
    return new if new is not None else old


def update_usage(usage: Mapping[str, JsonValue], part: Mapping[str, JsonValue] | None) -> JsonObject:
    """R9.5: merge the usage of a ``message_start``/``message_delta`` event into ``usage``.

    Input, cache-creation and cache-read token counts change only to a positive value; output tokens,
    the server-tool request counts, the cache-creation split, ``iterations`` and ``speed`` take the
    event's value when it has one; ``service_tier`` and ``inference_geo`` keep the accumulated value.
    Other keys of the event are not carried (Claude Code's usage object has exactly these).
    """
    if part is None:
        return {key: _copy(value) for key, value in usage.items()}
    part_server = part.get("server_tool_use")
    part_cache = part.get("cache_creation")
    server = usage.get("server_tool_use")
    cache = usage.get("cache_creation")
    return {
        "input_tokens": _positive_or(part.get("input_tokens"), usage.get("input_tokens")),
        "cache_creation_input_tokens": _positive_or(
            part.get("cache_creation_input_tokens"), usage.get("cache_creation_input_tokens")
        ),
        "cache_read_input_tokens": _positive_or(
            part.get("cache_read_input_tokens"), usage.get("cache_read_input_tokens")
        ),
        "output_tokens": _present_or(part.get("output_tokens"), usage.get("output_tokens")),
        "server_tool_use": {
            "web_search_requests": _present_or(
                _field(part_server, "web_search_requests"), _field(server, "web_search_requests")
            ),
            "web_fetch_requests": _present_or(
                _field(part_server, "web_fetch_requests"), _field(server, "web_fetch_requests")
            ),
        },
        "service_tier": usage.get("service_tier"),
        "cache_creation": {
            "ephemeral_1h_input_tokens": _present_or(
                _field(part_cache, "ephemeral_1h_input_tokens"), _field(cache, "ephemeral_1h_input_tokens")
            ),
            "ephemeral_5m_input_tokens": _present_or(
                _field(part_cache, "ephemeral_5m_input_tokens"), _field(cache, "ephemeral_5m_input_tokens")
            ),
        },
        "inference_geo": usage.get("inference_geo"),
        "iterations": _copy(_present_or(part.get("iterations"), usage.get("iterations"))),
        "speed": _present_or(part.get("speed"), usage.get("speed")),
    }


def _copy(value: JsonValue) -> JsonValue:
    """A deep copy of a JSON value, so accumulated usages never share mutable parts."""
    if isinstance(value, dict):
        return {key: _copy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_copy(item) for item in value]
    return value
