"""M1.5: default and upper ``max_tokens`` per model, the capability table, the bounded override."""

from __future__ import annotations

import pytest

from agentbus_redis.model.limits.max_tokens import (
    CAPPED_DEFAULT_MAX_TOKENS,
    MaxTokensLimits,
    MaxTokensTable,
    default_max_tokens,
    max_tokens_upper_limit,
    resolve_max_tokens,
)

M1_5_TABLE = [
    ("claude-opus-4-6", 64_000, 128_000),
    ("claude-sonnet-4-6", 32_000, 128_000),
    ("claude-opus-4-5-20251101", 32_000, 64_000),
    ("claude-sonnet-4-5-20250929", 32_000, 64_000),
    ("claude-sonnet-4-20250514", 32_000, 64_000),
    ("claude-haiku-4-5-20251001", 32_000, 64_000),
    ("claude-opus-4-1-20250805", 32_000, 32_000),
    ("claude-opus-4-20250514", 32_000, 32_000),
    ("claude-3-opus-20240229", 4_096, 4_096),
    ("claude-3-sonnet-20240229", 8_192, 8_192),
    ("claude-3-haiku-20240307", 4_096, 4_096),
    ("claude-3-5-sonnet-20241022", 8_192, 8_192),
    ("claude-3-5-haiku-20241022", 8_192, 8_192),
    ("claude-3-7-sonnet-20250219", 32_000, 64_000),
    ("some-other-model", 32_000, 64_000),
]


@pytest.mark.parametrize(("model", "default", "upper"), M1_5_TABLE)
def test_m1_5_table_rows(model: str, default: int, upper: int) -> None:
    assert default_max_tokens(model) == default
    assert max_tokens_upper_limit(model) == upper


def test_m1_5_newer_model_falls_into_first_matching_row() -> None:
    """M1.5 [OBS]: ``claude-opus-4-7`` matches ``opus-4`` → 32 000 / 32 000."""
    assert (default_max_tokens("claude-opus-4-7"), max_tokens_upper_limit("claude-opus-4-7")) == (32_000, 32_000)


def test_m1_5_match_is_case_insensitive() -> None:
    assert default_max_tokens("Claude-Opus-4-6") == 64_000


def test_m1_5_capability_table_replaces_upper_and_clamps_default() -> None:
    table = MaxTokensTable(exact={"Claude-Opus-4-7": 128_000, "claude-x-small": 16_000, "claude-tiny": 2_000})
    assert max_tokens_upper_limit("claude-opus-4-7", table=table) == 128_000
    assert default_max_tokens("claude-opus-4-7", table=table) == 32_000
    # clamps the default: fallback row 32 000 > 16 000
    assert (
        default_max_tokens("claude-x-small", table=table),
        max_tokens_upper_limit("claude-x-small", table=table),
    ) == (
        16_000,
        16_000,
    )
    # below 4 096 the entry is not trusted
    assert max_tokens_upper_limit("claude-tiny", table=table) == 64_000


def test_m1_5_exact_entry_for_exact_id_or_its_dated_snapshot() -> None:
    table = MaxTokensTable(exact={"claude-opus-4-7": 128_000})
    assert max_tokens_upper_limit("claude-opus-4-7-20260101", table=table) == 128_000
    assert max_tokens_upper_limit("claude-opus-4-7-fast", table=table) == 32_000


def test_m1_5_exact_entry_can_be_a_full_row() -> None:
    table = MaxTokensTable(exact={"claude-opus-4-7": MaxTokensLimits(64_000, 128_000)})
    assert default_max_tokens("claude-opus-4-7", table=table) == 64_000
    assert max_tokens_upper_limit("claude-opus-4-7", table=table) == 128_000


def test_m1_5_override_bounded_by_upper_limit() -> None:
    assert resolve_max_tokens("claude-opus-4-1", 50_000) == 32_000
    assert resolve_max_tokens("claude-sonnet-4-5", 50_000) == 50_000
    assert resolve_max_tokens("claude-sonnet-4-5", None) == 32_000


@pytest.mark.parametrize("bad", [0, -5])
def test_m1_5_invalid_override_ignored(bad: int) -> None:
    assert resolve_max_tokens("claude-sonnet-4-5", bad) == 32_000


def test_m1_5_capped_default_gate() -> None:
    assert default_max_tokens("claude-opus-4-6", capped_default=True) == CAPPED_DEFAULT_MAX_TOKENS
    assert default_max_tokens("claude-3-opus", capped_default=True) == 4_096
    # an explicit override is not capped
    assert resolve_max_tokens("claude-opus-4-6", 20_000, capped_default=True) == 20_000
