"""The per-tenant requests/min and tokens/min budget in front of the model (issue 18 "cost and limits"):
a call over the limit is delayed, never failed; concurrent workers never exceed the limit — counted on the
reservations' start times (an injected clock), not timed — on one Redis and on a Cluster."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY

from agentbus_redis.config.settings import RateLimitSettings, TenantRateLimit
from agentbus_redis.runtime import redis_client
from agentbus_redis.stores.token_bucket import TokenBucket, rate_limit_key
from agentbus_redis.streams.names import StreamNames
from tests.conftest import ON_EVERY_TARGET

pytestmark = [pytest.mark.integration, ON_EVERY_TARGET]

NAMES = StreamNames(shards=8)
T0 = 1_800_000_000_000.0
"""The injected clock's time (epoch ms)."""


def at_t0(redis: aioredis.Redis, **limits: int) -> TokenBucket:
    return TokenBucket(redis, NAMES, RateLimitSettings(**limits), clock_ms=lambda: T0)


def starts_within_limit(starts_ms: list[float], limit_per_min: int, costs: list[int] | None = None) -> bool:
    """Whether every window [a, b] of start times holds at most ``limit + limit × (b − a) / 60 s``."""
    order = sorted(range(len(starts_ms)), key=lambda index: starts_ms[index])
    times = [starts_ms[index] for index in order]
    weights = [costs[index] if costs else 1 for index in order]
    for first in range(len(times)):
        used = 0
        for last in range(first, len(times)):
            used += weights[last]
            if used > limit_per_min + limit_per_min * (times[last] - times[first]) / 60_000 + 1e-6:
                return False
    return True


async def test_unlimited_tenant_goes_at_once_without_touching_redis(target_redis: aioredis.Redis) -> None:
    bucket = TokenBucket(target_redis, NAMES, RateLimitSettings())
    assert await bucket.acquire("acme", tokens=10**9) == 0.0
    assert await target_redis.exists(rate_limit_key(NAMES, "acme")) == 0


async def test_requests_per_min_concurrent_workers_never_exceed_the_limit(target_url: str) -> None:
    """Four workers reserve 100 calls at the same instant against 60 requests/min: 60 go at once (a full
    bucket), the other 40 are spread one second apart, first come first served — none is refused."""
    workers = [redis_client.connect(target_url) for _ in range(4)]
    try:
        buckets = [at_t0(worker, requests_per_min=60) for worker in workers]
        reservations = await asyncio.gather(
            *(buckets[n % 4].reserve("acme", tokens=1) for n in range(100)),
        )
    finally:
        for worker in workers:
            await worker.aclose()
    waits = sorted(reservation.wait_s for reservation in reservations)
    assert waits[:60] == [0.0] * 60
    assert waits[60:] == pytest.approx([float(k) for k in range(1, 41)])
    assert {reservation.bound_by for reservation in reservations if reservation.wait_s} == {"requests"}
    assert starts_within_limit([reservation.start_ms for reservation in reservations], 60)


async def test_tokens_per_min_a_call_waits_until_its_estimate_fits(target_redis: aioredis.Redis) -> None:
    """1 000 tokens/min: three calls of 300 go at once, the fourth needs 200 more tokens = 12 s."""
    bucket = at_t0(target_redis, tokens_per_min=1000)
    waits = [(await bucket.reserve("acme", tokens=300)).wait_s for _ in range(4)]
    assert waits == pytest.approx([0, 0, 0, 12])


async def test_tokens_per_min_concurrent_mixed_sizes_stay_within_the_limit(target_url: str) -> None:
    workers = [redis_client.connect(target_url) for _ in range(3)]
    sizes = [(n * 37) % 500 + 1 for n in range(60)]
    try:
        buckets = [at_t0(worker, tokens_per_min=2000) for worker in workers]
        reservations = await asyncio.gather(
            *(buckets[n % 3].reserve("acme", tokens=size) for n, size in enumerate(sizes))
        )
    finally:
        for worker in workers:
            await worker.aclose()
    starts = [reservation.start_ms for reservation in reservations]
    assert starts_within_limit(starts, 2000, sizes)
    assert sum(1 for reservation in reservations if reservation.wait_s == 0) < len(sizes)


async def test_an_estimate_over_the_limit_goes_with_a_full_bucket_and_later_calls_pay_the_debt(
    target_redis: aioredis.Redis,
) -> None:
    bucket = at_t0(target_redis, tokens_per_min=1000)
    assert (await bucket.reserve("acme", tokens=3000)).wait_s == 0  # never refused, however large
    # The bucket is 2 000 in debt: the next 100 tokens wait for 2 100 tokens of refill = 126 s.
    assert (await bucket.reserve("acme", tokens=100)).wait_s == pytest.approx(126)


async def test_both_limits_the_later_of_the_two_decides(target_redis: aioredis.Redis) -> None:
    bucket = at_t0(target_redis, requests_per_min=2, tokens_per_min=600)
    first, second, third = [await bucket.reserve("acme", tokens=250) for _ in range(3)]
    assert (first.wait_s, second.wait_s) == (0, 0)
    # Requests: 0 left, one more in 30 s. Tokens: 100 left, 150 more in 15 s. Requests decide.
    assert third.wait_s == pytest.approx(30)
    assert third.bound_by == "requests"
    fourth = await bucket.reserve("acme", tokens=600)
    # At 30 s the token bucket held 100 + 300 − 250 = 150; a full 600 is 450 tokens = 45 s later.
    assert fourth.wait_s == pytest.approx(75)
    assert fourth.bound_by == "tokens"


async def test_settle_gives_back_an_over_estimate_and_charges_an_under_estimate(target_redis: aioredis.Redis) -> None:
    bucket = at_t0(target_redis, tokens_per_min=1000)
    await bucket.reserve("acme", tokens=900)
    await bucket.settle("acme", estimated=900, actual=100)  # 800 back: 900 available
    assert (await bucket.reserve("acme", tokens=900)).wait_s == 0
    await bucket.settle("acme", estimated=900, actual=1400)  # 500 more: 500 in debt
    assert (await bucket.reserve("acme", tokens=100)).wait_s == pytest.approx(36)  # 600 tokens of refill


async def test_tenants_have_their_own_budgets_and_overrides(target_redis: aioredis.Redis) -> None:
    limits = RateLimitSettings(requests_per_min=1, tenants={"big": TenantRateLimit(requests_per_min=100)})
    bucket = TokenBucket(target_redis, NAMES, limits, clock_ms=lambda: T0)
    assert [(await bucket.reserve("small", tokens=0)).wait_s for _ in range(2)] == [0, 60]
    assert [(await bucket.reserve("big", tokens=0)).wait_s for _ in range(2)] == [0, 0]
    assert [(await bucket.reserve("{other}", tokens=0)).wait_s for _ in range(2)] == [0, 60]


async def test_acquire_sleeps_the_wait_and_counts_it_in_the_metrics(target_redis: aioredis.Redis) -> None:
    """The real path: Redis's clock, a real sleep (a short one: 60 000 tokens/min = 1 token/ms)."""

    def waits() -> float:
        return REGISTRY.get_sample_value("agentbus_model_rate_limit_waits_total", {"limit": "tokens"}) or 0.0

    bucket = TokenBucket(target_redis, NAMES, RateLimitSettings(tokens_per_min=60_000))
    before = waits()
    assert await bucket.acquire("acme", tokens=60_000) == 0.0
    started = time.monotonic()
    waited = await bucket.acquire("acme", tokens=40)
    assert waited > 0
    assert time.monotonic() - started >= waited
    assert waits() == before + 1
    count = REGISTRY.get_sample_value("agentbus_model_rate_limit_wait_seconds_count", {"limit": "tokens"})
    assert count is not None
    assert count >= 1


async def test_a_call_cancelled_while_waiting_gives_its_reservation_back(target_redis: aioredis.Redis) -> None:
    bucket = at_t0(target_redis, requests_per_min=1)
    assert (await bucket.reserve("acme", tokens=0)).wait_s == 0
    waiting = asyncio.create_task(bucket.acquire("acme", tokens=0))  # 60 s in line
    key = rate_limit_key(NAMES, "acme")
    while float(await target_redis.hget(key, "at") or 0) <= T0:
        await asyncio.sleep(0.001)
    waiting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiting
    assert (await bucket.reserve("acme", tokens=0)).wait_s == pytest.approx(60)  # not 120
