"""The price table of this deployment (M10.3): the shipped :data:`~agentbus_redis.model.cost.DEFAULT_PRICES`, or the
JSON/TOML file named by ``AGENTBUS_PRICING__PRICES_FILE`` (same shape; it replaces the shipped table)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import ValidationError

from agentbus_redis.config.settings import PricingSettings
from agentbus_redis.model.cost import DEFAULT_PRICES, PriceTable, parse_price_table


class PriceTableError(ValueError):
    """The configured prices file cannot be read or is not a price table (message names the file)."""


def load_price_table(settings: PricingSettings) -> PriceTable:
    """The configured table; raises :class:`PriceTableError` for a missing or malformed file (a worker
    must not silently price with the wrong table)."""
    if settings.prices_file is None:
        return DEFAULT_PRICES
    return read_price_file(settings.prices_file)


def read_price_file(path: Path) -> PriceTable:
    file_format: Literal["json", "toml"] = "toml" if path.suffix.lower() == ".toml" else "json"
    try:
        text = path.read_bytes()
    except OSError as error:
        raise PriceTableError(f"cannot read prices file {path}: {error.strerror or error}") from error
    try:
        return parse_price_table(text, file_format=file_format)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in problem['loc']) or '(top)'}: {problem['msg']}"
            for problem in error.errors()
        )
        raise PriceTableError(f"prices file {path} is not a price table: {problems}") from error
    except ValueError as error:  # json.JSONDecodeError and tomllib.TOMLDecodeError are ValueErrors
        raise PriceTableError(f"prices file {path} is not valid {file_format.upper()}: {error}") from error
