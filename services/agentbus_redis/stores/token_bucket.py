"""Per-tenant rate limits in front of the model: requests per minute and tokens per minute, in Redis.

The API answers a burst over an organisation's limits with 429s (M3.1, M3.2); every worker retrying on
its own (M4) turns that into a storm. So the model workers share one budget per tenant and a call over
it **waits** for capacity rather than failing (issue 18: "delays rather than fails").

**Algorithm.** Two token buckets per tenant — requests and tokens — each holding at most one minute's
limit and refilled continuously at ``limit / 60 s``. A call *reserves* its start time: one Lua script
reads both buckets, finds the earliest time at which both hold what the call needs (1 request; its token
estimate, or a full bucket for an estimate over the limit), debits both *as of that time* and returns
how long to wait. The caller sleeps that long and goes. Reservations are served first come, first
served: a bucket's state is kept as of its latest reservation, which may lie in the future, and a new
reservation never starts before it. Every start therefore finds both buckets non-negative, so however
many workers acquire at once, the calls started in any window of ``w`` seconds stay within
``limit + limit × w / 60`` — counted in the tests, not timed. No caller polls: one round trip per call.

:meth:`TokenBucket.settle` corrects the token charge once the reply's usage is known (a refund, or a
further debit that later calls wait for); a call cancelled while it waits gives its reservation back.

**Keys.** One hash per tenant, ``<prefix>{tenant:<tenant>}:rate_limit`` (fields ``r``/``t``: the request
and token levels, ``at``: epoch ms they are valid at). The hash tag keeps a tenant's state in one slot of a
Redis Cluster (one key today; any key added for the tenant must carry the same tag). It expires once both
buckets would be full again. The time is the Redis server's (``TIME``), the one clock every worker shares;
tests may pass their own.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal
from urllib.parse import quote

import redis.asyncio as aioredis

from agentbus_redis.config.settings import RateLimitSettings
from agentbus_redis.observability.metrics import record_rate_limit_wait
from agentbus_redis.runtime.key_calls import ServerScript
from agentbus_redis.streams.names import StreamNames

DEFAULT_TENANT: Final = "default"
"""The tenant of a session whose configuration names none (``SessionModelConfig.tenant``)."""

BoundBy = Literal["none", "requests", "tokens"]

_LEVELS_LUA = """
local function clock()
  if ARGV[1] ~= '' then
    return tonumber(ARGV[1])
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local now = clock()
local state = redis.call('HMGET', KEYS[1], 'r', 't', 'at')
local at = tonumber(state[3]) or now
local function level_at(level, limit, when)
  if limit <= 0 then
    return 0
  end
  local current = tonumber(level) or limit
  return math.min(limit, current + (when - at) * limit / 60000)
end
"""

_RESERVE = ServerScript(
    _LEVELS_LUA
    + """
local request_limit = tonumber(ARGV[2])
local token_limit = tonumber(ARGV[3])
local tokens = tonumber(ARGV[4])
local start = math.max(now, at)
local function ready(level, limit, need)
  if limit <= 0 then
    return start
  end
  local have = level_at(level, limit, start)
  if have >= need then
    return start
  end
  return start + (need - have) * 60000 / limit
end
local request_ready = ready(state[1], request_limit, math.min(1, request_limit))
local token_ready = ready(state[2], token_limit, math.min(tokens, token_limit))
local begin = math.max(request_ready, token_ready)
local fields = {'at', tostring(begin)}
if request_limit > 0 then
  table.insert(fields, 'r')
  table.insert(fields, tostring(level_at(state[1], request_limit, begin) - 1))
end
if token_limit > 0 then
  table.insert(fields, 't')
  table.insert(fields, tostring(level_at(state[2], token_limit, begin) - tokens))
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], math.ceil(begin - now) + 120000)
local bound = 'none'
if begin > now then
  bound = (request_ready >= token_ready) and 'requests' or 'tokens'
end
return {tostring(begin - now), bound, tostring(begin)}
"""
)
"""KEYS: the tenant's hash. ARGV: now (epoch ms; ``''``: the server's clock), requests/min, tokens/min (0:
unlimited), the call's token estimate. Returns [wait ms, which limit made it wait, start epoch ms] (as
strings: Redis would truncate a Lua number to an integer)."""

_CREDIT = ServerScript(
    _LEVELS_LUA
    + """
local request_limit = tonumber(ARGV[2])
local token_limit = tonumber(ARGV[3])
local fields = {'at', tostring(at)}
if request_limit > 0 then
  table.insert(fields, 'r')
  table.insert(fields, tostring(math.min(request_limit, level_at(state[1], request_limit, at) + tonumber(ARGV[4]))))
end
if token_limit > 0 then
  table.insert(fields, 't')
  table.insert(fields, tostring(math.min(token_limit, level_at(state[2], token_limit, at) + tonumber(ARGV[5]))))
end
redis.call('HSET', KEYS[1], unpack(fields))
redis.call('PEXPIRE', KEYS[1], math.max(0, math.ceil(at - now)) + 120000)
return 1
"""
)
"""KEYS: the tenant's hash. ARGV: now, requests/min, tokens/min, requests to give back, tokens to give back
(negative: charge more). Applied to the levels as of the latest reservation, capped at a full bucket."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """A call's place in its tenant's budget."""

    wait_s: float
    """How long the caller must wait before it calls the model (0: at once)."""
    bound_by: BoundBy
    """Which limit made it wait."""
    start_ms: float
    """When it may start (epoch ms, on the clock the script used; 0 for a tenant without limits)."""


def rate_limit_key(names: StreamNames, tenant: str) -> str:
    """The tenant's bucket hash: its own hash tag (braces and ``%`` in a tenant name are escaped, so the
    tag always ends where it should)."""
    return f"{names.prefix}{{tenant:{quote(tenant, safe='')}}}:rate_limit"


class TokenBucket:
    """Requests/min and tokens/min per tenant, shared by every model worker through Redis."""

    def __init__(
        self,
        redis: aioredis.Redis,
        names: StreamNames,
        limits: RateLimitSettings,
        *,
        clock_ms: Callable[[], float] | None = None,
    ) -> None:
        self.redis = redis
        self.names = names
        self.limits = limits
        self.clock_ms = clock_ms
        """None: the Redis server's clock (what every worker shares); tests pass their own."""

    def _now_arg(self) -> str:
        return "" if self.clock_ms is None else repr(float(self.clock_ms()))

    async def reserve(self, tenant: str, *, tokens: int) -> Reservation:
        """Reserve one call of ``tokens`` (estimated) for ``tenant`` without waiting: when it may start."""
        requests_per_min, tokens_per_min = self.limits.limits_for(tenant)
        if not requests_per_min and not tokens_per_min:
            return Reservation(wait_s=0.0, bound_by="none", start_ms=0.0)
        args: list[str | int] = [self._now_arg(), requests_per_min, tokens_per_min, max(tokens, 0)]
        reply: Any = await _RESERVE.run(self.redis, [rate_limit_key(self.names, tenant)], args)
        wait_ms, bound, start = (item.decode() if isinstance(item, bytes) else str(item) for item in reply)
        return Reservation(wait_s=max(float(wait_ms), 0.0) / 1000, bound_by=_bound(bound), start_ms=float(start))

    async def acquire(self, tenant: str, *, tokens: int) -> float:
        """Wait until ``tenant``'s requests/min and tokens/min budgets allow one call of ``tokens`` (an
        estimate, e.g. the request's input tokens plus its ``max_tokens``: :meth:`settle` corrects it once
        the reply's usage is known); returns the seconds waited. Never fails because of the limit.
        Cancelled while waiting (an interrupt), it gives the reservation back."""
        # A cancel can land while the reservation's round trip is in flight: Redis has booked it but the
        # answer is not read yet. Shielding the reservation lets the cancel path wait for it and give it back.
        reserving = asyncio.ensure_future(self.reserve(tenant, tokens=tokens))
        try:
            reservation = await asyncio.shield(reserving)
            record_rate_limit_wait(reservation.bound_by, reservation.wait_s)
            if reservation.wait_s > 0:
                await asyncio.sleep(reservation.wait_s)
        except asyncio.CancelledError:
            await asyncio.shield(self._give_back(reserving, tenant, tokens))
            raise
        return max(reservation.wait_s, 0.0)

    async def _give_back(self, reserving: asyncio.Future[Reservation], tenant: str, tokens: int) -> None:
        """Credit a cancelled call's reservation back, once it is known to exist."""
        with contextlib.suppress(Exception):
            await reserving
        if reserving.done() and not reserving.cancelled() and reserving.exception() is None:
            await self._credit(tenant, requests=1, tokens=max(tokens, 0))

    async def settle(self, tenant: str, *, estimated: int, actual: int) -> None:
        """Correct the token charge of a call once its usage is known: gives back what was over-estimated,
        or charges what was under-estimated (later calls then wait for it)."""
        if estimated != actual:
            await self._credit(tenant, requests=0, tokens=estimated - actual)

    async def _credit(self, tenant: str, *, requests: int, tokens: int) -> None:
        requests_per_min, tokens_per_min = self.limits.limits_for(tenant)
        if not requests_per_min and not tokens_per_min:
            return
        args: list[str | int] = [self._now_arg(), requests_per_min, tokens_per_min, requests, tokens]
        await _CREDIT.run(self.redis, [rate_limit_key(self.names, tenant)], args)


def _bound(value: str) -> BoundBy:
    if value == "requests":
        return "requests"
    if value == "tokens":
        return "tokens"
    return "none"
