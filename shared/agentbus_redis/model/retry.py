"""Claude Code's retry policy for one model call (agent-loop.md §M4, ``withRetry``), as pure rules.

The worker maps every failed attempt (an HTTP error status, a connection error or timeout, an ``error``
event in a stream) onto an :class:`ApiFailure` and asks :func:`decide` what to do next: retry after a delay
(M4.3), retry at once with a smaller ``max_tokens`` (M4.11), switch to the fallback model (M4.5.3, M6), or
give up (the caller then publishes the M7 error text). :class:`RetryState` carries the attempt number and
the consecutive-529 counter of one logical call (M4.9 seeds it at 1 for the non-streaming fallback after a
mid-stream overload).

We are an API-key, non-subscriber, foreground caller: the subscriber, OAuth, cloud-credential, fast-mode
and unattended branches of M4.5/M4.6 do not apply. No I/O, no clock, no randomness: the jitter is an
argument.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agentbus_redis.json_types import JsonValue
from agentbus_redis.model.limits.window import (
    ContextOverflow,
    ContextOverflowAction,
    decide_context_overflow,
    parse_context_overflow,
)

BASE_DELAY_MS = 500
"""M4.3 ``BASE_DELAY_MS``."""
MAX_DELAY_MS = 32_000
"""M4.3 default cap of the exponential delay."""
DEFAULT_MAX_RETRIES = 10
"""M4.2: attempts run 1 … 11."""
MAX_529_RETRIES = 3
"""M4.5.3 ``MAX_529_RETRIES``: overloads in a row before the fallback-model switch."""
JITTER_FRACTION = 0.25
"""M4.3: up to a quarter of the base delay is added at random."""

REPEATED_529_ERROR = "Repeated 529 Overloaded errors"
"""M6.4: the error a call fails with after three overloads and no fallback model."""

_LEADING_DIGITS = re.compile(r"\s*(\d+)")
_OAUTH_REVOKED = "OAuth token has been revoked"


@dataclass(frozen=True, slots=True)
class ApiFailure:
    """One failed attempt, in SDK-free terms.

    ``status`` is the HTTP status (None for a connection error or timeout; 200 for an ``error`` event that
    arrived in a stream, M2.3), ``error_type``/``message`` the body's ``error.type``/``error.message``,
    ``body`` the parsed body, ``headers`` the response headers with lower-case names.
    """

    status: int | None
    error_type: str | None = None
    message: str = ""
    body: JsonValue = None
    headers: Mapping[str, str] = field(default_factory=dict)
    connection: bool = False
    """A transport failure: no response (connection refused/reset, dropped stream, timeout)."""
    timeout: bool = False

    @property
    def overloaded(self) -> bool:
        """A 529, or an ``overloaded_error`` whose status was lost in a stream (M4.6, M4.12)."""
        return self.status == 529 or self.error_type == "overloaded_error"

    @property
    def context_overflow(self) -> ContextOverflow | None:
        """M4.11: the counts of the 400 "input length and `max_tokens` exceed context limit"."""
        return parse_context_overflow(self.message) if self.status == 400 else None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """The knobs of M4 (defaults: Claude Code's). ``base_delay_ms``/``max_delay_ms`` scale the whole
    exponential schedule (tests run it scaled down)."""

    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay_ms: float = BASE_DELAY_MS
    max_delay_ms: float = MAX_DELAY_MS
    max_529_retries: int = MAX_529_RETRIES
    fallback_for_all_models: bool = True
    """M4.5.3 counts 529s only for a non-custom Opus primary model unless ``FALLBACK_FOR_ALL_PRIMARY_MODELS`` is
    set; a worker with a fallback model configured wants the switch for every model (M6.6), so on by default."""


@dataclass(slots=True)
class RetryState:
    """One logical call's progress through :func:`decide`."""

    attempt: int = 0
    """Attempts made so far (the one that just failed is ``attempt``)."""
    consecutive_529: int = 0
    max_tokens_override: int | None = None
    """M4.11: the ``max_tokens`` the next attempt sends after a context overflow."""


@dataclass(frozen=True, slots=True)
class Retry:
    """Sleep ``delay_ms`` and try again. ``notify``: publish the M4.4 ``api_error`` system message first."""

    delay_ms: float
    notify: bool = True


@dataclass(frozen=True, slots=True)
class SwitchModel:
    """M4.5.3 / M6: three overloads in a row: re-issue the request on ``fallback``."""

    original: str
    fallback: str


GiveUpReason = Literal["repeated_529", "exhausted", "not_retryable", "context_floor"]


@dataclass(frozen=True, slots=True)
class GiveUp:
    """Stop retrying: the call fails with ``failure`` (or :data:`REPEATED_529_ERROR`, M6.4)."""

    reason: GiveUpReason
    failure: ApiFailure


Decision = Retry | SwitchModel | GiveUp


def is_opus(model: str) -> bool:
    return "opus" in model.lower()


def retry_after_ms(headers: Mapping[str, str]) -> float | None:
    """M4.3: a ``retry-after`` whose leading digits parse as an integer is that many seconds (``"7.5"`` → 7 s;
    an HTTP date does not parse). Without it, ``retry-after-ms`` (M3.3, the SDK's header) if positive."""
    raw = headers.get("retry-after")
    if raw is not None:
        match = _LEADING_DIGITS.match(raw)
        if match is not None:
            return int(match[1]) * 1000.0
    raw_ms = headers.get("retry-after-ms")
    if raw_ms is not None:
        try:
            value = float(raw_ms)
        except ValueError:
            return None
        if value > 0:
            return value
    return None


def backoff_base_ms(attempt: int, *, base_ms: float = BASE_DELAY_MS, max_ms: float = MAX_DELAY_MS) -> float:
    """M4.3: ``min(base × 2^(k−1), cap)`` for the attempt ``k`` (1-based) that just failed."""
    if attempt < 1:
        msg = f"attempt numbers start at 1, got {attempt}"
        raise ValueError(msg)
    return min(base_ms * 2.0 ** (attempt - 1), max_ms)


def backoff_ms(
    attempt: int,
    headers: Mapping[str, str],
    *,
    jitter: float,
    base_ms: float = BASE_DELAY_MS,
    max_ms: float = MAX_DELAY_MS,
) -> float:
    """M4.3: the wait after attempt ``attempt`` failed: the ``retry-after`` time exactly (no cap, no jitter),
    else ``base + jitter × 0.25 × base`` with ``jitter`` in [0, 1). Test vectors: k=1 → [500, 625) ms,
    k=2 → [1000, 1250), k=6 → [16 000, 20 000), k≥7 → [32 000, 40 000); ``retry-after: 7`` → 7 000."""
    after = retry_after_ms(headers)
    if after is not None:
        return after
    if not 0.0 <= jitter < 1.0:
        msg = f"jitter must be in [0, 1), got {jitter}"
        raise ValueError(msg)
    base = backoff_base_ms(attempt, base_ms=base_ms, max_ms=max_ms)
    return base + jitter * JITTER_FRACTION * base


def backoff_window_ms(
    attempt: int, *, base_ms: float = BASE_DELAY_MS, max_ms: float = MAX_DELAY_MS
) -> tuple[float, float]:
    """[low, high) of the jittered wait after attempt ``attempt`` (no ``retry-after``)."""
    base = backoff_base_ms(attempt, base_ms=base_ms, max_ms=max_ms)
    return base, base * (1 + JITTER_FRACTION)


def should_retry(failure: ApiFailure) -> bool:
    """M4.6 for an API-key, non-subscriber caller."""
    if failure.overloaded or failure.context_overflow is not None:
        return True
    should = failure.headers.get("x-should-retry")
    if should == "true":
        return True
    if should == "false":
        return False
    if failure.connection or failure.timeout:
        return True
    status = failure.status
    if status is None:
        return False
    if status in (408, 409, 429, 401):
        return True
    if status == 403 and _OAUTH_REVOKED in failure.message:
        return True
    return status >= 500


def context_overflow_max_tokens(failure: ApiFailure, *, thinking_budget: int | None) -> int | None:
    """M4.11 (``model/limits/window.py``): the ``max_tokens`` of the next attempt after a context overflow,
    None when what is left is below the floor (the error is final)."""
    overflow = failure.context_overflow
    if overflow is None:
        return None
    decision = decide_context_overflow(overflow, thinking_budget=thinking_budget)
    return decision.max_tokens if decision.action is ContextOverflowAction.RETRY else None


def decide(
    failure: ApiFailure,
    state: RetryState,
    *,
    policy: RetryPolicy,
    model: str,
    fallback_model: str | None,
    jitter: float,
    thinking_budget: int | None = None,
) -> Decision:
    """M4.5, first matching rule wins, for the attempt ``state.attempt`` that failed with ``failure``.

    Updates ``state`` (529 counter, ``max_tokens`` override). Rule 2 (background sources) does not apply: every
    call of a worker is a foreground call.
    """
    if failure.overloaded and (policy.fallback_for_all_models or is_opus(model)):
        state.consecutive_529 += 1
        if state.consecutive_529 >= policy.max_529_retries:
            if fallback_model is not None and fallback_model != model:
                return SwitchModel(original=model, fallback=fallback_model)
            return GiveUp("repeated_529", failure)
    elif not failure.overloaded:
        state.consecutive_529 = 0
    if state.attempt > policy.max_retries:
        return GiveUp("exhausted", failure)
    if not should_retry(failure):
        return GiveUp("not_retryable", failure)
    if failure.context_overflow is not None:
        adjusted = context_overflow_max_tokens(failure, thinking_budget=thinking_budget)
        if adjusted is None:
            return GiveUp("context_floor", failure)
        state.max_tokens_override = adjusted
        return Retry(0.0, notify=False)
    delay = backoff_ms(
        state.attempt, failure.headers, jitter=jitter, base_ms=policy.base_delay_ms, max_ms=policy.max_delay_ms
    )
    return Retry(delay)


def retry_category(failure: ApiFailure) -> str:
    """M4.4 ``api_retry.error``: ``rate_limit`` (429, 529, overloaded), ``authentication_failed`` (401/403),
    ``server_error`` (other status ≥ 408), ``unknown`` (no status)."""
    status = failure.status
    if failure.overloaded or status == 429:
        return "rate_limit"
    if status in (401, 403):
        return "authentication_failed"
    if status is not None and status >= 408 and status != 200:
        return "server_error"
    return "unknown"
