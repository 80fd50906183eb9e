"""The per-tenant rate limits are configuration: defaults, per-tenant overrides, 0 = unlimited."""

from __future__ import annotations

import pytest

from agentbus_redis.config.settings import RateLimitSettings, Settings
from agentbus_redis.stores.token_bucket import rate_limit_key
from agentbus_redis.streams.names import StreamNames


def test_limits_are_read_from_the_environment_with_tenant_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBUS_RATE_LIMIT__REQUESTS_PER_MIN", "50")
    monkeypatch.setenv("AGENTBUS_RATE_LIMIT__TOKENS_PER_MIN", "40000")
    monkeypatch.setenv(
        "AGENTBUS_RATE_LIMIT__TENANTS", '{"acme": {"tokens_per_min": 400000}, "free": {"requests_per_min": 5}}'
    )
    limits = Settings().rate_limit
    assert limits.limits_for("anyone") == (50, 40_000)
    assert limits.limits_for("acme") == (50, 400_000)  # an override names only what it changes
    assert limits.limits_for("free") == (5, 40_000)


def test_no_limit_by_default() -> None:
    assert RateLimitSettings().limits_for("default") == (0, 0)


@pytest.mark.parametrize("tenant", ["acme", "{s01-08}", "a}b{c", "100%", ""])
def test_each_tenant_key_has_its_own_hash_tag(tenant: str) -> None:
    key = rate_limit_key(StreamNames(), tenant)
    tag = key[key.index("{") + 1 : key.index("}")]
    assert tag.startswith("tenant:")
    assert key.endswith("}:rate_limit")
    assert key.count("{") == key.count("}") == 1
