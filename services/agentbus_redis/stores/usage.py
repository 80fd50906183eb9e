"""Per-session model usage and cost on the bus (M10.5, M10.6): one Redis hash per session.

``Topology.usage(session_id)`` is a hash of integer counters, ``model:<model id>:<counter>`` (the counters
of :class:`~agentbus_redis.model.usage_totals.ModelUsage`), plus ``prices:<as_of>`` (calls priced with the price
table of that date: a cost is never recomputed with a newer table, M10.6) and ``updated_at_ms``. Session
totals are the sum over models, computed when read (so they cannot drift from the per-model figures).

A call is recorded by one Lua script: every ``HINCRBY`` of the call lands at once or not at all, and
concurrent workers' calls add up exactly (integers, cost in nano-dollars). The hash is a session key, so
it carries the session's hash tag and lives in the session's slot on a Redis Cluster.

**Recording twice.** A worker may record a call and crash before it acknowledges the request, or lose
the reply of a record that was applied and retry it. Given the call's ``request_id`` — the API's
``request-id`` header or the message id (``msg_…``): one per *billed call*, so a request that was
re-sent to the model after a crash is a new call and is counted, as it was billed — the script records
only if that id is not in the session's seen-set (a sorted set beside the hash, same slot, scored by
time; ids older than ``dedupe_window_s`` are dropped and the set expires with the session's activity).
"""

from __future__ import annotations

import time
from typing import Any, Final

import redis.asyncio as aioredis

from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cost import PriceTable, price_call
from agentbus_redis.model.usage_totals import COUNTERS, ModelUsage, SessionUsage, call_usage
from agentbus_redis.runtime.key_calls import ServerScript
from agentbus_redis.streams.topology import Topology

MODEL_FIELD_PREFIX: Final = "model:"
PRICES_FIELD_PREFIX: Final = "prices:"
UPDATED_FIELD: Final = "updated_at_ms"
DEFAULT_DEDUPE_WINDOW_S: Final = 24 * 3600.0
"""How long a recorded call's id is remembered: far longer than any redelivery of the request."""

_RECORD = ServerScript(
    """
local now = tonumber(ARGV[2])
if ARGV[1] ~= '' then
  local window = tonumber(ARGV[3])
  redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', now - window)
  if redis.call('ZADD', KEYS[2], 'NX', now, ARGV[1]) == 0 then
    return 0
  end
  redis.call('PEXPIRE', KEYS[2], window)
end
for i = 4, #ARGV, 2 do
  redis.call('HINCRBY', KEYS[1], ARGV[i], ARGV[i + 1])
end
local last = tonumber(redis.call('HGET', KEYS[1], 'updated_at_ms') or '0')
if now > last then
  redis.call('HSET', KEYS[1], 'updated_at_ms', now)
end
return 1
"""
)
"""KEYS: the usage hash, the seen-set. ARGV: the call's id (``''``: record without the check), now (epoch ms),
the dedupe window (ms), then field / increment pairs. Returns 1 when recorded, 0 for an id already seen."""


def seen_key(topology: Topology, session_id: str) -> str:
    """The seen-set of recorded call ids, beside the usage hash (same hash tag, same slot)."""
    return topology.usage(session_id) + ":seen"


def model_field(model: str, counter: str) -> str:
    return f"{MODEL_FIELD_PREFIX}{model}:{counter}"


async def record_usage(
    redis: aioredis.Redis,
    topology: Topology,
    session_id: str,
    *,
    model: str,
    usage: JsonObject,
    cost_usd: float,
    priced: bool = True,
    prices_as_of: str | None = None,
    request_id: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
    now_ms: int | None = None,
) -> bool:
    """Add one call of ``model`` (its final API ``usage`` object and computed cost) to the session's totals.

    ``priced=False`` marks a call whose model no price covered; ``prices_as_of`` names the price table
    (M10.6). With ``request_id`` the call is recorded at most once per ``dedupe_window_s`` (module
    docstring). Returns False when it was already recorded.
    """
    part = call_usage(usage, cost_usd=cost_usd, priced=priced)
    return await record_model_usage(
        redis,
        topology,
        session_id,
        model=model,
        part=part,
        prices_as_of=prices_as_of,
        request_id=request_id,
        dedupe_window_s=dedupe_window_s,
        now_ms=now_ms,
    )


async def record_priced_usage(
    redis: aioredis.Redis,
    topology: Topology,
    session_id: str,
    *,
    model: str,
    usage: JsonObject,
    prices: PriceTable,
    request_id: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
) -> bool:
    """Price one call with ``prices`` (M10.1) and record it with the table's date: what a model worker calls
    once per response, at ``message_stop`` (or with the non-streaming reply)."""
    cost = price_call(model, usage, prices)
    return await record_usage(
        redis,
        topology,
        session_id,
        model=model,
        usage=usage,
        cost_usd=cost.usd,
        priced=cost.priced,
        prices_as_of=cost.as_of.isoformat(),
        request_id=request_id,
        dedupe_window_s=dedupe_window_s,
    )


async def record_model_usage(
    redis: aioredis.Redis,
    topology: Topology,
    session_id: str,
    *,
    model: str,
    part: ModelUsage,
    prices_as_of: str | None = None,
    request_id: str | None = None,
    dedupe_window_s: float = DEFAULT_DEDUPE_WINDOW_S,
    now_ms: int | None = None,
) -> bool:
    """Add ``part`` (usually one call: :func:`record_usage`) to the session's totals of ``model``."""
    increments: list[str | int] = []
    for counter, value in part.counters().items():
        if value:
            increments += [model_field(model, counter), value]
    if prices_as_of is not None and part.requests:
        increments += [PRICES_FIELD_PREFIX + prices_as_of, part.requests]
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    args = [request_id or "", now, max(1, round(dedupe_window_s * 1000)), *increments]
    recorded = await _RECORD.run(redis, [topology.usage(session_id), seen_key(topology, session_id)], args)
    return bool(recorded)


async def read_usage(redis: aioredis.Redis, topology: Topology, session_id: str) -> SessionUsage:
    """The session's usage so far (empty — no models — for a session without recorded calls)."""
    raw: Any = await redis.hgetall(topology.usage(session_id))
    return usage_from_hash(session_id, raw)


def usage_from_hash(session_id: str, raw: dict[bytes | str, bytes | str]) -> SessionUsage:
    """A :class:`SessionUsage` from the fields of a usage hash (unknown fields are ignored: a newer writer
    may add counters)."""
    models: dict[str, dict[str, int]] = {}
    tables: dict[str, int] = {}
    updated: int | None = None
    for key, value in raw.items():
        field = key.decode() if isinstance(key, bytes) else key
        number = int(value)
        if field.startswith(MODEL_FIELD_PREFIX):
            model, _, counter = field[len(MODEL_FIELD_PREFIX) :].rpartition(":")
            if model and counter in COUNTERS:
                models.setdefault(model, {})[counter] = number
        elif field.startswith(PRICES_FIELD_PREFIX):
            tables[field[len(PRICES_FIELD_PREFIX) :]] = number
        elif field == UPDATED_FIELD:
            updated = number
    return SessionUsage(
        session_id=session_id,
        models={model: ModelUsage(**counters) for model, counters in sorted(models.items())},
        price_tables=dict(sorted(tables.items())),
        updated_at_ms=updated,
        sessions=[session_id],
    )
