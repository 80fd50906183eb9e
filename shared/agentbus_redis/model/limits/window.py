"""Prompt-too-long, ``max_tokens`` and context-window handling (agent-loop.md M8, M4.11) as decisions.

The worker asks; these functions answer with a typed decision — what to send next, or which M7 error
the turn ends with. The error texts themselves live in ``model/error_texts.py``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Final

from agentbus_redis.model.limits.max_tokens import ESCALATED_MAX_TOKENS

FLOOR_OUTPUT_TOKENS: Final = 3_000
"""M4.11: below this many available output tokens the context-overflow 400 is not retried."""
CONTEXT_OVERFLOW_MARGIN: Final = 1_000
"""M4.11: tokens kept free below the context limit when lowering ``max_tokens``."""
MAX_OUTPUT_TOKENS_RECOVERY_LIMIT: Final = 3
"""M8.5: resumptions after a truncated reply within one turn."""
DEFAULT_CONTEXT_WINDOW: Final = 200_000
ONE_MILLION_CONTEXT_WINDOW: Final = 1_000_000
BLOCKING_LIMIT_BUFFER: Final = 3_000
"""M8.1: blocking limit = effective window − 3 000."""
MAX_OUTPUT_RESERVE: Final = 20_000
"""M8.1: effective window = context window − min(model max_tokens, 20 000)."""
AUTOCOMPACT_BUFFER: Final = 13_000
"""M8.1: auto-compaction threshold = effective window − 13 000."""

OUTPUT_TOKEN_RECOVERY_MESSAGE: Final = (
    "Output token limit hit. Resume directly — no apology, no recap of what you were doing. "
    "Pick up mid-thought if that is where the cut happened. Break remaining work into smaller pieces."
)
"""M8.5: the meta user message that asks the model to continue a truncated reply."""

_PROMPT_TOO_LONG = re.compile(r"prompt is too long[^0-9]*(\d+)\s*tokens?\s*>\s*(\d+)", re.IGNORECASE)
_CONTEXT_OVERFLOW = re.compile(r"input length and `max_tokens` exceed context limit: (\d+) \+ (\d+) > (\d+)")


# --- M8.2 prompt too long -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PromptTooLong:
    """M8.2: the token counts of a prompt-too-long error (``prompt is too long: 137500 tokens > 135000
    maximum``)."""

    actual_tokens: int
    limit_tokens: int

    @property
    def excess_tokens(self) -> int:
        return self.actual_tokens - self.limit_tokens


def is_prompt_too_long(message: str) -> bool:
    """M7.2: the error message says ``prompt is too long`` (any case; a 400, or a 413 on Vertex)."""
    return "prompt is too long" in message.lower()


def parse_prompt_too_long(message: str) -> PromptTooLong | None:
    """M8.2: the token gap, parsed leniently ("prompt is too long … <actual> token(s) > <limit>", any
    case); ``None`` when the message carries no counts."""
    found = _PROMPT_TOO_LONG.search(message)
    return PromptTooLong(int(found.group(1)), int(found.group(2))) if found else None


# --- M4.11 context overflow -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ContextOverflow:
    """M4.11: ``input length and `max_tokens` exceed context limit: <input> + <max> > <limit>``."""

    input_tokens: int
    max_tokens: int
    context_limit: int


def parse_context_overflow(message: str) -> ContextOverflow | None:
    """M4.11: the counts of the context-overflow 400; ``None`` for any other message."""
    found = _CONTEXT_OVERFLOW.search(message)
    if found is None:
        return None
    return ContextOverflow(int(found.group(1)), int(found.group(2)), int(found.group(3)))


def preflight_context_overflow(*, input_tokens: int, max_tokens: int, context_window: int) -> ContextOverflow | None:
    """The same condition checked before sending (``input + max_tokens > context``), for a worker that
    knows the input size; ``None`` when the request fits."""
    if input_tokens + max_tokens > context_window:
        return ContextOverflow(input_tokens, max_tokens, context_window)
    return None


class ContextOverflowAction(StrEnum):
    RETRY = "retry"
    """Retry at once with the lowered ``max_tokens`` (no sleep, no ``api_error`` system message)."""
    GIVE_UP = "give_up"
    """Fewer than 3 000 tokens left for output: the 400 is the final error (M7 ``API Error: …``)."""


@dataclass(frozen=True, slots=True)
class ContextOverflowDecision:
    action: ContextOverflowAction
    available_tokens: int
    """``max(0, limit − input − 1 000)``."""
    max_tokens: int | None
    """The next attempt's ``max_tokens`` (the retry-context override of M1.5) when retrying."""


def decide_context_overflow(
    overflow: ContextOverflow, *, thinking_budget: int | None = None
) -> ContextOverflowDecision:
    """M4.11: available = max(0, limit − input − 1 000); below 3 000 give up, else retry with
    ``max(3 000, available, thinking_budget + 1)`` (``thinking_budget`` only when thinking is
    ``enabled``). Example: ``188059 + 20000 > 200000`` → 10 941; ``198500 + 8000 > 200000`` → give up."""
    available = max(0, overflow.context_limit - overflow.input_tokens - CONTEXT_OVERFLOW_MARGIN)
    if available < FLOOR_OUTPUT_TOKENS:
        return ContextOverflowDecision(ContextOverflowAction.GIVE_UP, available, None)
    candidates = [FLOOR_OUTPUT_TOKENS, available]
    if thinking_budget is not None:
        candidates.append(thinking_budget + 1)
    return ContextOverflowDecision(ContextOverflowAction.RETRY, available, max(candidates))


# --- M8.1 pre-flight blocking limit ---------------------------------------------------------------


def context_window(model: str, *, windows: Mapping[str, int] | None = None) -> int:
    """The model's context window: a configured exact-id entry, else 1 000 000 for a ``[1m]`` model id
    (Claude Code's opt-in suffix), else 200 000."""
    configured = (windows or {}).get(model.lower())
    if configured is not None:
        return configured
    return ONE_MILLION_CONTEXT_WINDOW if "[1m]" in model.lower() else DEFAULT_CONTEXT_WINDOW


def effective_context_window(window: int, model_max_tokens: int) -> int:
    """M8.1: the context window minus the output reserve, ``min(model max_tokens, 20 000)``."""
    return window - min(model_max_tokens, MAX_OUTPUT_RESERVE)


def blocking_limit(window: int, model_max_tokens: int) -> int:
    """M8.1: estimated input tokens at or above this → no request, ``Prompt is too long``. Example:
    200 000 window, max_tokens 32 000 → 177 000."""
    return effective_context_window(window, model_max_tokens) - BLOCKING_LIMIT_BUFFER


def autocompact_threshold(window: int, model_max_tokens: int) -> int:
    """M8.1: auto-compaction threshold (200 000 / 32 000 → 167 000)."""
    return effective_context_window(window, model_max_tokens) - AUTOCOMPACT_BUFFER


def is_blocked(estimated_input_tokens: int, *, window: int, model_max_tokens: int, override: int | None = None) -> bool:
    """M8.1: the request is not sent (assistant error ``Prompt is too long``, reason ``blocking_limit``);
    ``override`` (``CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE``) replaces the computed limit."""
    return estimated_input_tokens >= (override if override is not None else blocking_limit(window, model_max_tokens))


def lowered_window(window: int, configured: int | None) -> int:
    """M8.1: a configured window (``CLAUDE_CODE_AUTO_COMPACT_WINDOW``) may only lower the model's."""
    return min(window, configured) if configured is not None and configured > 0 else window


# --- M8.3–M8.5 truncated replies ------------------------------------------------------------------


class OutputLimitError(StrEnum):
    """Which withheld M7 error a truncated reply carries (both have ``apiError: max_output_tokens``)."""

    MAX_OUTPUT_TOKENS = "max_tokens"
    """M8.3: ``API Error: Claude's response exceeded the <max_tokens> output token maximum. …``"""
    CONTEXT_WINDOW = "model_context_window_exceeded"
    """M8.4: ``API Error: The model has reached its context window limit.``"""


def output_limit_error(stop_reason: str | None) -> OutputLimitError | None:
    """M8.3/M8.4: the stop reasons that mean "cut off"; ``None`` for every other one."""
    try:
        return OutputLimitError(stop_reason) if stop_reason is not None else None
    except ValueError:
        return None


class OutputLimitAction(StrEnum):
    ESCALATE = "escalate"
    """M8.5 (gated ``tengu_otk_slot_v1``): re-issue the same request once with ``max_tokens`` 64 000."""
    RESUME = "resume"
    """M8.5: keep the partial reply, add the meta user message :data:`OUTPUT_TOKEN_RECOVERY_MESSAGE`,
    call again."""
    GIVE_UP = "give_up"
    """M8.5: after 3 resumptions emit the withheld error (:class:`OutputLimitError`); the turn ends."""
    RUN_TOOLS = "run_tools"
    """M8.5 [OBS]: the truncated reply streamed a tool_use: no recovery, the withheld error is not
    emitted, the tools run (a cut tool input became ``{}``, M2.4)."""


@dataclass(frozen=True, slots=True)
class OutputLimitState:
    """M8.6: the per-turn recovery state (reset when a new turn or a tool follow-up starts)."""

    recovery_count: int = 0
    max_tokens_override: int | None = None
    """M1.5's loop override: 64 000 after an escalation."""


@dataclass(frozen=True, slots=True)
class OutputLimitDecision:
    action: OutputLimitAction
    error: OutputLimitError
    state: OutputLimitState
    """The state for the next call of this turn."""
    max_tokens: int | None = None
    """ESCALATE: the ``max_tokens`` to send (64 000)."""


def decide_output_limit(
    error: OutputLimitError,
    *,
    state: OutputLimitState,
    tool_use_streamed: bool,
    capped_default: bool = False,
    explicit_max_tokens: bool = False,
) -> OutputLimitDecision:
    """M8.5 for a reply that stopped with ``max_tokens`` or ``model_context_window_exceeded``.

    ``capped_default``: the 8 000 default cap is on (M1.5 gate); ``explicit_max_tokens``: the session
    or worker configured ``max_tokens`` (Claude Code: ``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` set), which
    rules out the escalation."""
    if tool_use_streamed:
        return OutputLimitDecision(OutputLimitAction.RUN_TOOLS, error, OutputLimitState())
    if capped_default and state.max_tokens_override is None and not explicit_max_tokens:
        escalated = replace(state, max_tokens_override=ESCALATED_MAX_TOKENS)
        return OutputLimitDecision(OutputLimitAction.ESCALATE, error, escalated, ESCALATED_MAX_TOKENS)
    if state.recovery_count < MAX_OUTPUT_TOKENS_RECOVERY_LIMIT:
        resumed = replace(state, recovery_count=state.recovery_count + 1)
        return OutputLimitDecision(OutputLimitAction.RESUME, error, resumed)
    return OutputLimitDecision(OutputLimitAction.GIVE_UP, error, state)


def loop_max_tokens(default: int, *, state: OutputLimitState, retry_override: int | None = None) -> int:
    """M1.5 precedence for the value sent: the retry-context override (M4.11), else the loop override
    (M8.5), else the model default."""
    if retry_override is not None:
        return retry_override
    if state.max_tokens_override is not None:
        return state.max_tokens_override
    return default


__all__ = [
    "AUTOCOMPACT_BUFFER",
    "BLOCKING_LIMIT_BUFFER",
    "CONTEXT_OVERFLOW_MARGIN",
    "DEFAULT_CONTEXT_WINDOW",
    "FLOOR_OUTPUT_TOKENS",
    "MAX_OUTPUT_RESERVE",
    "MAX_OUTPUT_TOKENS_RECOVERY_LIMIT",
    "ONE_MILLION_CONTEXT_WINDOW",
    "OUTPUT_TOKEN_RECOVERY_MESSAGE",
    "ContextOverflow",
    "ContextOverflowAction",
    "ContextOverflowDecision",
    "OutputLimitAction",
    "OutputLimitDecision",
    "OutputLimitError",
    "OutputLimitState",
    "PromptTooLong",
    "autocompact_threshold",
    "blocking_limit",
    "context_window",
    "decide_context_overflow",
    "decide_output_limit",
    "effective_context_window",
    "is_blocked",
    "is_prompt_too_long",
    "loop_max_tokens",
    "lowered_window",
    "output_limit_error",
    "parse_context_overflow",
    "parse_prompt_too_long",
    "preflight_context_overflow",
]
