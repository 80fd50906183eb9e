"""What one model call cost, in USD, from its usage object and a dated price table (agent-loop.md §M10).

M10.1 [REC]: a call is priced once, from the merged usage of the whole response (:mod:`agentbus_redis.streaming.usage`),
and the two cache-write lifetimes at their own rates::

    usd = (input × in + output × out + cache_read × read + eph_5m × write_5m + eph_1h × write_1h) / 10⁶
          + web_search_requests × web_search_usd

Claude Code itself prices every cache write at the 5-minute rate (M10.1 [OBS], it under-reports 1h
writes); we do not. When the usage has no ``cache_creation`` breakdown, the whole
``cache_creation_input_tokens`` is priced at the 5-minute rate; when the breakdown covers less than that
total, the remainder is too (a proxy may report only the total).

Which prices apply to a model id (:func:`find_prices`): the table's key equal to the id, else the longest
key that is a *family* of it — the id contains the key and what follows the key is not a further version
number. So ``claude-sonnet-4-5-20250929``, ``anthropic.claude-sonnet-4-5-20250929-v1:0`` and
``claude-sonnet-4-5@20250929`` are priced as ``claude-sonnet-4-5``, but ``claude-opus-4-9`` is *not*
priced as ``claude-opus-4`` (M1.5 [OBS]: a plain substring rule prices a newer model at an older family's
rates, here 3× too high). A model no key covers is **unknown**: its cost is 0 and :class:`CallCost` says so
(``priced=False``), unless the table names ``unknown_model`` prices (Claude Code's choice, M10.1: the
default model's rates and a flag).

Prices are configuration (M10.3: "must live in configuration, not code"): :data:`DEFAULT_PRICES` is only the
table shipped with this version, dated; a deployment replaces it with a JSON or TOML file of the same shape
(``AGENTBUS_PRICING__PRICES_FILE``, read by ``stores/price_table.py``). Costs are computed when a
call is recorded and never recomputed with a newer table (M10.6).
"""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agentbus_redis.json_types import JsonValue

PER_MTOK = 1_000_000


class ModelPrices(BaseModel):
    """One model's rates in USD per million tokens (the columns of the pricing page)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    input: float = Field(ge=0, description="base input tokens")
    output: float = Field(ge=0, description="output tokens")
    cache_write_5m: float = Field(ge=0, description="5-minute cache writes (1.25 × input on the page)")
    cache_write_1h: float = Field(ge=0, description="1-hour cache writes (2 × input on the page)")
    cache_read: float = Field(ge=0, description="cache hits and refreshes")
    fast: ModelPrices | None = Field(
        None, description='rates when the usage says ``"speed": "fast"`` (fast mode); None: the standard rates'
    )


class PriceTable(BaseModel):
    """Prices of every model we know, and the date they were read (M10.3, M10.6)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    as_of: date = Field(description="when these prices were taken from the pricing page")
    source: str = Field("", description="where they were taken from")
    models: dict[str, ModelPrices] = Field(description="model id or family (see find_prices) → its rates")
    web_search_usd: float = Field(0.01, ge=0, description="per server-side web search request (M10.1)")
    unknown_model: ModelPrices | None = Field(
        None, description="rates for a model no key covers; None: such a call costs 0 and is flagged unpriced"
    )


@dataclass(frozen=True, slots=True)
class CallCost:
    """The price of one call and how it was found."""

    usd: float
    priced: bool
    """False: no prices covered the model, ``usd`` is 0 (or the ``unknown_model`` estimate)."""
    priced_as: str | None
    """The table key whose rates were used (None for an unknown model)."""
    as_of: date
    """The date of the table that priced it (M10.6: the price-table version)."""


_VERSION_NEXT = re.compile(r"-\d{1,2}(?!\d)")
"""What follows a family key in a *newer* model's id: a one- or two-digit version part (``-9``, ``-10``);
a date (``-20250929``), ``-latest``, ``-v1:0``, ``@…`` or ``[1m]`` do not count."""


def find_prices(model: str, table: PriceTable) -> tuple[str, ModelPrices] | None:
    """The rates of ``model``: its exact key, else the longest family key (module docstring), else None."""
    name = model.strip().lower()
    exact = table.models.get(name)
    if exact is not None:
        return name, exact
    best: str | None = None
    for key in table.models:
        if len(key) <= len(best or "") or not _is_family_of(key, name):
            continue
        best = key
    return (best, table.models[best]) if best is not None else None


def _is_family_of(key: str, name: str) -> bool:
    start = name.find(key)
    while start >= 0:
        before_ok = start == 0 or not name[start - 1].isalnum()
        if before_ok and not _VERSION_NEXT.match(name, start + len(key)):
            return True
        start = name.find(key, start + 1)
    return False


def usage_count(usage: Mapping[str, JsonValue], key: str) -> int:
    """A counter of a usage object; missing, negative, fractional or non-numeric values count as 0."""
    value = usage.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_object(usage: Mapping[str, JsonValue], key: str) -> Mapping[str, JsonValue]:
    """A nested object of a usage object (``cache_creation``, ``server_tool_use``); anything else counts as {}."""
    value = usage.get(key)
    return value if isinstance(value, dict) else {}


@dataclass(frozen=True, slots=True)
class CacheWrites:
    """The cache-creation tokens of one usage object by lifetime (M10.1 [REC])."""

    five_minutes: int
    one_hour: int


def cache_writes(usage: Mapping[str, JsonValue]) -> CacheWrites:
    """``cache_creation.ephemeral_5m/1h_input_tokens``; whatever of ``cache_creation_input_tokens`` the
    breakdown does not cover (all of it when there is none) counts as 5-minute writes."""
    split = usage_object(usage, "cache_creation")
    five = usage_count(split, "ephemeral_5m_input_tokens")
    hour = usage_count(split, "ephemeral_1h_input_tokens")
    rest = usage_count(usage, "cache_creation_input_tokens") - five - hour
    return CacheWrites(five_minutes=five + max(rest, 0), one_hour=hour)


def price_call(model: str, usage: Mapping[str, JsonValue], table: PriceTable) -> CallCost:
    """M10.1: the cost of one call of ``model`` whose (merged, final) usage object is ``usage``.

    Never raises on odd usage: a missing, negative or non-integer counter counts as 0.
    """
    found = find_prices(model, table)
    prices = found[1] if found is not None else table.unknown_model
    if prices is None:
        return CallCost(usd=0.0, priced=False, priced_as=None, as_of=table.as_of)
    if usage.get("speed") == "fast" and prices.fast is not None:
        prices = prices.fast
    writes = cache_writes(usage)
    tokens_usd = (
        usage_count(usage, "input_tokens") * prices.input
        + usage_count(usage, "output_tokens") * prices.output
        + usage_count(usage, "cache_read_input_tokens") * prices.cache_read
        + writes.five_minutes * prices.cache_write_5m
        + writes.one_hour * prices.cache_write_1h
    ) / PER_MTOK
    searches = usage_count(usage_object(usage, "server_tool_use"), "web_search_requests")
    return CallCost(
        usd=tokens_usd + searches * table.web_search_usd,
        priced=found is not None,
        priced_as=found[0] if found is not None else None,
        as_of=table.as_of,
    )


def cost_usd(model: str, usage: Mapping[str, JsonValue], prices: PriceTable) -> float:
    """M10.1: the USD cost of one call (0 for a model the table does not cover; see :func:`price_call`)."""
    return price_call(model, usage, prices).usd


def parse_price_table(text: str | bytes, *, file_format: Literal["json", "toml"]) -> PriceTable:
    """A price table from the text of a JSON or TOML file (same shape as :class:`PriceTable`); raises
    ``pydantic.ValidationError`` (with the field's location) or the parser's error."""
    if file_format == "toml":
        raw = tomllib.loads(text.decode() if isinstance(text, bytes) else text)
    else:
        raw = json.loads(text)
    return PriceTable.model_validate(raw)


def _rates(input_usd: float, output_usd: float, write_5m: float, write_1h: float, read: float) -> ModelPrices:
    return ModelPrices(
        input=input_usd, output=output_usd, cache_write_5m=write_5m, cache_write_1h=write_1h, cache_read=read
    )


# Rates per MTok: input, output, 5m write, 1h write, cache hit.
_FABLE_5_1 = _rates(10, 50, 12.50, 20, 0.25)
_FABLE_5 = _rates(10, 50, 12.50, 20, 1)
_OPUS_4_5_ON = _rates(5, 25, 6.25, 10, 0.50)
_OPUS_4 = _rates(15, 75, 18.75, 30, 1.50)
_SONNET_5 = _rates(2, 10, 2.50, 4, 0.20)
_SONNET_3_7_ON = _rates(3, 15, 3.75, 6, 0.30)
_HAIKU_4_5 = _rates(1, 5, 1.25, 2, 0.10)
_HAIKU_3_5 = _rates(0.80, 4, 1, 1.6, 0.08)
_HAIKU_3 = _rates(0.25, 1.25, 0.30, 0.50, 0.03)
# Fast mode on Opus 4.6: $30 / $150 input / output (fast-mode page: 6× the standard Opus rates for prompts
# ≤ 200K tokens; "stacks with other pricing modifiers", so the cache rates are 6× too — derived, the page
# lists only input and output). Prompts > 200K in fast mode ($60 / $225) are not modelled.
_OPUS_4_6_FAST = _rates(30, 150, 37.50, 60, 3)

DEFAULT_PRICES = PriceTable(
    as_of=date(2026, 11, 25),
    source=(
        "https://platform.claude.com/docs/en/about-claude/pricing (Fable/Mythos 5.x, Opus 5, 4.8, 4.7, 4.6, 4.5, "
        "4.1, 4); https://platform.claude.com/docs/zh-CN/about-claude/pricing (Sonnet 4.6, 4.5, 4, 3.7, "
        "Haiku 4.5, 3.5, 3, Opus 3); https://docs.anthropic.com/en/docs/about-claude/pricing (Sonnet 3.5); "
        "https://platform.claude.com/docs/zh-CN/models/sonnet-5/overview (Sonnet 5); "
        "https://platform.claude.com/docs/en/build-with-claude/fast-mode (Opus 4.6 fast)"
    ),
    models={
        # Model ids: the API ids without their date; aliases (``-0``) spelled out, since a family key never
        # covers a further version part. The Mythos ids are our reading of the naming scheme (the page names
        # the models, not their ids).
        "claude-fable-5-1": _FABLE_5_1,
        "claude-mythos-5-1": _FABLE_5_1,
        "claude-fable-5": _FABLE_5,
        "claude-mythos-5": _FABLE_5,
        "claude-opus-5": _OPUS_4_5_ON,
        "claude-opus-4-8": _OPUS_4_5_ON,
        "claude-opus-4-7": _OPUS_4_5_ON,
        "claude-opus-4-6": _OPUS_4_5_ON.model_copy(update={"fast": _OPUS_4_6_FAST}),
        "claude-opus-4-5": _OPUS_4_5_ON,
        "claude-opus-4-1": _OPUS_4,
        "claude-opus-4-0": _OPUS_4,
        "claude-opus-4": _OPUS_4,
        "claude-3-opus": _OPUS_4,
        "claude-sonnet-5": _SONNET_5,
        "claude-sonnet-4-6": _SONNET_3_7_ON,
        "claude-sonnet-4-5": _SONNET_3_7_ON,
        "claude-sonnet-4-0": _SONNET_3_7_ON,
        "claude-sonnet-4": _SONNET_3_7_ON,
        "claude-3-7-sonnet": _SONNET_3_7_ON,
        "claude-3-5-sonnet": _SONNET_3_7_ON,
        "claude-haiku-4-5": _HAIKU_4_5,
        "claude-3-5-haiku": _HAIKU_3_5,
        "claude-3-haiku": _HAIKU_3,
        # Not in this table, because no stored official page gives all five rates (M10.3 "verify before
        # use"): Opus 5.5 ($4 / $20 on its overview page; cache rates only from third parties), Sonnet 5.5
        # ($2 / $10 on its overview page; cache-hit price changed 2026-10-07 per third parties) and Haiku 5.5
        # (two price bands by prompt length, which a flat table cannot express). Calls of these models are
        # recorded with their tokens and flagged unpriced; add them in a prices file once verified.
    },
)
"""The prices shipped with this version, read 2026-11-25 from the pages named in ``source`` (M10.3)."""
