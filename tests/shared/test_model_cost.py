"""M10: the cost of one call from its usage and a dated price table; usage summed across calls (M2.7)."""

from __future__ import annotations

from datetime import date

import pytest
from pydantic import ValidationError

from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cost import (
    DEFAULT_PRICES,
    ModelPrices,
    PriceTable,
    cache_writes,
    cost_usd,
    find_prices,
    parse_price_table,
    price_call,
)
from agentbus_redis.model.usage_totals import ModelUsage, SessionUsage, call_usage, combine_usage, nano_usd
from agentbus_redis.streaming.usage import EMPTY_USAGE, update_usage

SONNET_4_5 = "claude-sonnet-4-5-20250929"


def m10_2_usage(*, one_hour: bool) -> JsonObject:
    split: JsonObject = {
        "ephemeral_5m_input_tokens": 0 if one_hour else 5000,
        "ephemeral_1h_input_tokens": 5000 if one_hour else 0,
    }
    return {
        "input_tokens": 1000,
        "output_tokens": 500,
        "cache_read_input_tokens": 20_000,
        "cache_creation_input_tokens": 5000,
        "cache_creation": split,
    }


def test_m10_2_example_all_cache_writes_at_the_5_minute_rate() -> None:
    """M10.2: (3 000 + 7 500 + 6 000 + 18 750) / 10⁶ = $0.03525."""
    assert cost_usd(SONNET_4_5, m10_2_usage(one_hour=False), DEFAULT_PRICES) == pytest.approx(0.03525, abs=1e-12)


def test_m10_2_example_the_same_writes_at_the_1_hour_rate_cost_2x_input() -> None:
    """M10.2: 5 000 written at 1h → 5 000 × 6 = 30 000 → $0.04650 (Claude Code would say $0.03525, M10.1 [OBS])."""
    assert cost_usd(SONNET_4_5, m10_2_usage(one_hour=True), DEFAULT_PRICES) == pytest.approx(0.04650, abs=1e-12)


def test_m10_1_cache_creation_without_breakdown_is_priced_at_the_5_minute_rate() -> None:
    usage: JsonObject = {"input_tokens": 1000, "output_tokens": 500, "cache_read_input_tokens": 20_000}
    usage["cache_creation_input_tokens"] = 5000
    assert cost_usd(SONNET_4_5, usage, DEFAULT_PRICES) == pytest.approx(0.03525, abs=1e-12)


def test_m10_1_a_breakdown_that_covers_less_than_the_total_prices_the_rest_at_5_minutes() -> None:
    usage: JsonObject = {
        "cache_creation_input_tokens": 5000,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 1000},
    }
    assert cache_writes(usage).five_minutes == 4000
    assert cache_writes(usage).one_hour == 1000
    assert cost_usd(SONNET_4_5, usage, DEFAULT_PRICES) == pytest.approx((4000 * 3.75 + 1000 * 6) / 1e6)


def test_m10_1_the_merged_usage_of_a_stream_is_priced_once() -> None:
    """M2.6 merge then M10.1 price: the message_delta's 0 input does not erase message_start's."""
    start = {"input_tokens": 1200, "cache_read_input_tokens": 50_000, "output_tokens": 1}
    merged = update_usage(update_usage(EMPTY_USAGE, start), {"input_tokens": 0, "output_tokens": 412})
    expected = (1200 * 3 + 50_000 * 0.30 + 412 * 15) / 1e6
    assert cost_usd("claude-sonnet-4-6", merged, DEFAULT_PRICES) == pytest.approx(expected)


def test_m10_1_web_searches_cost_one_cent_each_web_fetches_nothing() -> None:
    usage: JsonObject = {"server_tool_use": {"web_search_requests": 3, "web_fetch_requests": 7}}
    assert cost_usd("claude-haiku-4-5", usage, DEFAULT_PRICES) == pytest.approx(0.03)


def test_m10_1_fast_mode_uses_the_fast_rates_where_the_table_has_them() -> None:
    usage: JsonObject = {"input_tokens": 1_000_000, "output_tokens": 1_000_000, "speed": "fast"}
    assert cost_usd("claude-opus-4-6", usage, DEFAULT_PRICES) == pytest.approx(30 + 150)
    assert cost_usd("claude-opus-4-5", usage, DEFAULT_PRICES) == pytest.approx(5 + 25)  # no fast rates: standard


@pytest.mark.parametrize(
    ("model", "rates"),
    [
        ("claude-opus-4-6", (5, 25, 6.25, 10, 0.50)),
        ("claude-opus-4-1-20250805", (15, 75, 18.75, 30, 1.50)),
        ("claude-opus-4-20250514", (15, 75, 18.75, 30, 1.50)),
        ("claude-opus-4-0", (15, 75, 18.75, 30, 1.50)),
        ("claude-sonnet-4-5-20250929", (3, 15, 3.75, 6, 0.30)),
        ("claude-sonnet-5", (2, 10, 2.50, 4, 0.20)),
        ("claude-3-7-sonnet-latest", (3, 15, 3.75, 6, 0.30)),
        ("claude-haiku-4-5-20251001", (1, 5, 1.25, 2, 0.10)),
        ("claude-3-5-haiku-20241022", (0.80, 4, 1, 1.6, 0.08)),
        ("claude-3-haiku-20240307", (0.25, 1.25, 0.30, 0.50, 0.03)),
        ("claude-fable-5-1", (10, 50, 12.50, 20, 0.25)),
        ("claude-fable-5", (10, 50, 12.50, 20, 1)),
    ],
)
def test_m10_3_shipped_prices_per_mtok(model: str, rates: tuple[float, ...]) -> None:
    found = find_prices(model, DEFAULT_PRICES)
    assert found is not None
    prices = found[1]
    assert (prices.input, prices.output, prices.cache_write_5m, prices.cache_write_1h, prices.cache_read) == rates


@pytest.mark.parametrize(
    ("model", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic.claude-sonnet-4-5-20250929-v1:0", "claude-sonnet-4-5"),  # Bedrock
        ("claude-sonnet-4-5@20250929", "claude-sonnet-4-5"),  # Vertex
        ("claude-sonnet-4-6[1m]", "claude-sonnet-4-6"),
        ("Claude-Opus-4-6", "claude-opus-4-6"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),  # the longest family wins over claude-opus-4
    ],
)
def test_m1_5_family_rule_prices_dated_and_provider_ids_as_their_family(model: str, family: str) -> None:
    found = find_prices(model, DEFAULT_PRICES)
    assert found is not None
    assert found[0] == family


@pytest.mark.parametrize("model", ["claude-opus-4-9", "claude-sonnet-5-5", "claude-haiku-5-5", "gpt-4o", ""])
def test_m1_5_obs_a_newer_version_is_not_priced_as_an_older_family(model: str) -> None:
    """M1.5 [OBS]: a plain substring rule would price claude-opus-4-9 as claude-opus-4 ($15, 3× too high)."""
    assert find_prices(model, DEFAULT_PRICES) is None


def test_m10_1_unknown_model_costs_nothing_and_is_flagged_never_raises() -> None:
    cost = price_call("claude-opus-4-9", m10_2_usage(one_hour=False), DEFAULT_PRICES)
    assert (cost.usd, cost.priced, cost.priced_as) == (0.0, False, None)
    assert cost.as_of == date(2026, 11, 25)


def test_m10_1_unknown_model_rates_when_the_table_names_them() -> None:
    """Claude Code's choice (M10.1): a default rate for unknown models, still flagged."""
    table = DEFAULT_PRICES.model_copy(update={"unknown_model": ModelPrices(**_five_twenty_five())})
    cost = price_call("claude-opus-4-9", {"input_tokens": 1_000_000}, table)
    assert (cost.usd, cost.priced) == (5.0, False)


def _five_twenty_five() -> dict[str, float]:
    return {"input": 5, "output": 25, "cache_write_5m": 6.25, "cache_write_1h": 10, "cache_read": 0.5}


@pytest.mark.parametrize(
    "usage",
    [
        {},
        {"input_tokens": None, "output_tokens": "12", "cache_creation": "x", "server_tool_use": []},
        {"input_tokens": -5, "output_tokens": True, "cache_creation_input_tokens": 1.5},
    ],
)
def test_odd_usage_counts_as_zero(usage: JsonObject) -> None:
    assert cost_usd("claude-sonnet-4-5", usage, DEFAULT_PRICES) == 0.0


def test_m10_3_a_price_file_of_the_same_shape_in_json_and_toml() -> None:
    json_text = (
        '{"as_of": "2027-01-01", "models": {"my-model": '
        '{"input": 1, "output": 2, "cache_write_5m": 1.25, "cache_write_1h": 2, "cache_read": 0.1}}}'
    )
    toml_text = """
as_of = 2027-01-01
[models.my-model]
input = 1
output = 2
cache_write_5m = 1.25
cache_write_1h = 2
cache_read = 0.1
"""
    for table in (parse_price_table(json_text, file_format="json"), parse_price_table(toml_text, file_format="toml")):
        assert table.as_of == date(2027, 1, 1)
        assert cost_usd("my-model-20270101", {"output_tokens": 1_000_000}, table) == 2.0
        assert find_prices("claude-sonnet-4-5", table) is None  # the file replaces the shipped table


def test_a_price_file_with_a_missing_rate_is_refused_with_its_location() -> None:
    with pytest.raises(ValidationError) as raised:
        parse_price_table('{"as_of": "2027-01-01", "models": {"m": {"input": 1}}}', file_format="json")
    assert ("models", "m", "output") in [problem["loc"] for problem in raised.value.errors()]


def test_shipped_table_is_dated_and_names_its_sources() -> None:
    assert DEFAULT_PRICES.as_of == date(2026, 11, 25)
    assert "platform.claude.com/docs/en/about-claude/pricing" in DEFAULT_PRICES.source
    assert PriceTable.model_validate(DEFAULT_PRICES.model_dump(mode="json")) == DEFAULT_PRICES


def test_m2_7_call_usage_splits_cache_writes_and_keeps_cost_in_nano_dollars() -> None:
    usage = m10_2_usage(one_hour=True) | {"server_tool_use": {"web_search_requests": 2, "web_fetch_requests": 1}}
    part = call_usage(usage, cost_usd=0.0665)
    assert part == ModelUsage(
        requests=1,
        input_tokens=1000,
        output_tokens=500,
        cache_creation_5m_input_tokens=0,
        cache_creation_1h_input_tokens=5000,
        cache_read_input_tokens=20_000,
        web_search_requests=2,
        web_fetch_requests=1,
        cost_nano_usd=66_500_000,
    )
    assert part.total_tokens == 26_500  # M10.4
    assert part.cost_usd == 0.0665


def test_m2_7_sums_are_exact_in_any_order() -> None:
    parts = [call_usage({"output_tokens": n}, cost_usd=0.1) for n in range(1, 11)]
    forward = sum(parts[1:], parts[0])
    backward = sum(reversed(parts[:-1]), parts[-1])
    assert forward == backward
    assert (forward.requests, forward.output_tokens, forward.cost_usd) == (10, 55, 1.0)
    assert nano_usd(float("nan")) == nano_usd(-1.0) == 0


def test_a5_a_tree_of_sessions_sums_per_model() -> None:
    root = SessionUsage(
        session_id="root",
        models={"claude-opus-4-6": call_usage({"input_tokens": 10}, cost_usd=1.0)},
        price_tables={"2026-11-25": 1},
        updated_at_ms=5,
        sessions=["root"],
    )
    child = SessionUsage(
        session_id="child",
        models={
            "claude-opus-4-6": call_usage({"input_tokens": 5}, cost_usd=0.5),
            "claude-haiku-4-5": call_usage({"output_tokens": 7}, cost_usd=0.25, priced=True),
        },
        price_tables={"2026-11-25": 2},
        updated_at_ms=9,
    )
    tree = combine_usage("root", [root, child])
    assert tree.sessions == ["root", "child"]
    assert list(tree.models) == ["claude-haiku-4-5", "claude-opus-4-6"]
    assert tree.models["claude-opus-4-6"].input_tokens == 15
    assert (tree.total.requests, tree.total.cost_usd, tree.price_tables, tree.updated_at_ms) == (
        3,
        1.75,
        {"2026-11-25": 3},
        9,
    )
