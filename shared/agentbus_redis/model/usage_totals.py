"""Usage and cost summed across calls: per model, per session, per tree of sessions (M2.7, M10.5).

:mod:`agentbus_redis.streaming.usage` merges the usage events of *one* streamed response (M2.6: later values overwrite);
here the final usage of each call is *added* to a total (M2.7: across turns every token counter is
summed). The counters are Claude Code's per-model session totals (M10.5: input, output, cache read, cache
creation, web searches, cost) with the cache writes split by lifetime, since they are priced apart
(M10.1 [REC]). Cost is kept in whole nano-dollars: integer sums are exact and do not depend on the order
concurrent workers add them in (a float total would).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from pydantic import BaseModel, ConfigDict, Field, computed_field

from agentbus_redis.json_types import JsonValue
from agentbus_redis.model.cost import CallCost, cache_writes, usage_count, usage_object

NANO_USD_PER_USD: Final = 1_000_000_000

COUNTERS: Final = (
    "requests",
    "input_tokens",
    "output_tokens",
    "cache_creation_5m_input_tokens",
    "cache_creation_1h_input_tokens",
    "cache_read_input_tokens",
    "web_search_requests",
    "web_fetch_requests",
    "cost_nano_usd",
    "unpriced_requests",
)
"""Every integer counter of :class:`ModelUsage`, in display order (also its field names in the store)."""


class ModelUsage(BaseModel):
    """The summed usage of the calls of one model (or of several models, for a total)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    requests: int = Field(0, ge=0, description="model calls recorded")
    input_tokens: int = Field(0, ge=0)
    output_tokens: int = Field(0, ge=0)
    cache_creation_5m_input_tokens: int = Field(0, ge=0)
    cache_creation_1h_input_tokens: int = Field(0, ge=0)
    cache_read_input_tokens: int = Field(0, ge=0)
    web_search_requests: int = Field(0, ge=0)
    web_fetch_requests: int = Field(0, ge=0)
    cost_nano_usd: int = Field(0, ge=0, description="cost in 10⁻⁹ USD (exact sums)")
    unpriced_requests: int = Field(0, ge=0, description="calls of a model the price table did not cover (cost 0)")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def cost_usd(self) -> float:
        return self.cost_nano_usd / NANO_USD_PER_USD

    @property
    def cache_creation_input_tokens(self) -> int:
        return self.cache_creation_5m_input_tokens + self.cache_creation_1h_input_tokens

    @property
    def total_tokens(self) -> int:
        """M10.4: input + cache creation + cache read + output."""
        return self.input_tokens + self.cache_creation_input_tokens + self.cache_read_input_tokens + self.output_tokens

    def counters(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in COUNTERS}

    def __add__(self, other: ModelUsage) -> ModelUsage:
        return ModelUsage(**{name: getattr(self, name) + getattr(other, name) for name in COUNTERS})


def nano_usd(usd: float) -> int:
    """``usd`` in whole nano-dollars (negative and non-finite amounts count as 0)."""
    return round(usd * NANO_USD_PER_USD) if usd > 0 and usd != float("inf") else 0


def call_usage(usage: Mapping[str, JsonValue], *, cost_usd: float, priced: bool = True) -> ModelUsage:
    """One call's contribution to the totals, from its final (merged) API usage object and its cost."""
    writes = cache_writes(usage)
    server_use = usage_object(usage, "server_tool_use")
    return ModelUsage(
        requests=1,
        input_tokens=usage_count(usage, "input_tokens"),
        output_tokens=usage_count(usage, "output_tokens"),
        cache_creation_5m_input_tokens=writes.five_minutes,
        cache_creation_1h_input_tokens=writes.one_hour,
        cache_read_input_tokens=usage_count(usage, "cache_read_input_tokens"),
        web_search_requests=usage_count(server_use, "web_search_requests"),
        web_fetch_requests=usage_count(server_use, "web_fetch_requests"),
        cost_nano_usd=nano_usd(cost_usd),
        unpriced_requests=0 if priced else 1,
    )


def priced_call_usage(usage: Mapping[str, JsonValue], cost: CallCost) -> ModelUsage:
    """:func:`call_usage` of a call priced by :func:`agentbus_redis.model.cost.price_call`."""
    return call_usage(usage, cost_usd=cost.usd, priced=cost.priced)


class SessionUsage(BaseModel):
    """Usage and cost of a session (or the sum of several: :func:`combine_usage`), per model (M10.5)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    session_id: str
    models: dict[str, ModelUsage] = Field(default_factory=dict, description="model id → its calls' usage")
    price_tables: dict[str, int] = Field(
        default_factory=dict, description="as_of date of each price table that priced calls → calls it priced"
    )
    updated_at_ms: int | None = Field(None, description="epoch ms of the last recorded call")
    sessions: list[str] = Field(default_factory=list, description="the sessions summed here (this one first)")

    @computed_field  # type: ignore[prop-decorator]
    @property
    def total(self) -> ModelUsage:
        return sum_models(self.models.values())

    @property
    def empty(self) -> bool:
        return not self.models


def sum_models(parts: Iterable[ModelUsage]) -> ModelUsage:
    total = ModelUsage()
    for part in parts:
        total = total + part
    return total


def combine_usage(session_id: str, parts: Iterable[SessionUsage]) -> SessionUsage:
    """The sum of several sessions' usage (a session and its sub-agents' sessions, A5) under ``session_id``:
    per-model counters and price-table counts added, the latest update kept, every summed session listed."""
    models: dict[str, ModelUsage] = {}
    tables: dict[str, int] = {}
    updated: int | None = None
    sessions: list[str] = []
    for part in parts:
        for model, usage in part.models.items():
            models[model] = models[model] + usage if model in models else usage
        for as_of, calls in part.price_tables.items():
            tables[as_of] = tables.get(as_of, 0) + calls
        if part.updated_at_ms is not None:
            updated = part.updated_at_ms if updated is None else max(updated, part.updated_at_ms)
        sessions.extend(name for name in part.sessions or [part.session_id] if name not in sessions)
    return SessionUsage(
        session_id=session_id,
        models=dict(sorted(models.items())),
        price_tables=dict(sorted(tables.items())),
        updated_at_ms=updated,
        sessions=sessions,
    )
