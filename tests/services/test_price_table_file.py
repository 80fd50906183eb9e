"""M10.3: the deployment's price table is configuration — the shipped one, or a file that replaces it."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbus_redis.config.settings import PricingSettings, Settings
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.stores.price_table import PriceTableError, load_price_table


def test_m10_3_without_a_file_the_shipped_table_prices() -> None:
    assert load_price_table(PricingSettings()) is DEFAULT_PRICES


def test_m10_3_the_prices_file_setting_is_read_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prices = tmp_path / "prices.toml"
    prices.write_text(
        'as_of = 2027-02-01\nsource = "our contract"\n'
        '[models."claude-sonnet-4-5"]\ninput = 2.4\noutput = 12\ncache_write_5m = 3\ncache_write_1h = 4.8\n'
        "cache_read = 0.24\n"
    )
    monkeypatch.setenv("AGENTBUS_PRICING__PRICES_FILE", str(prices))
    table = load_price_table(Settings().pricing)
    assert (table.as_of.isoformat(), table.source, table.models["claude-sonnet-4-5"].input) == (
        "2027-02-01",
        "our contract",
        2.4,
    )


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("missing.json", None, "cannot read prices file"),
        ("broken.json", "{", "is not valid JSON"),
        ("broken.toml", "as_of = ", "is not valid TOML"),
        ("shape.json", '{"as_of": "2027-01-01", "models": {"m": {"input": -1}}}', "models.m.input"),
    ],
)
def test_a_bad_prices_file_is_refused_naming_it(tmp_path: Path, name: str, text: str | None, problem: str) -> None:
    path = tmp_path / name
    if text is not None:
        path.write_text(text)
    with pytest.raises(PriceTableError) as raised:
        load_price_table(PricingSettings(prices_file=path))
    assert problem in str(raised.value)
    assert str(path) in str(raised.value)
