"""How big a model call may be: ``max_tokens`` per model (M1.5), the context window and prompt-too-long (M8,
M4.11), the rough token estimate of the pre-flight limit (M8.1), and ``maxTurns`` (A3.8, R10.6)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.model.limits.max_tokens import (
        ESCALATED_MAX_TOKENS,
        default_max_tokens,
        max_tokens_upper_limit,
        undated_model_id,
    )
    from agentbus_redis.model.limits.max_turns import (
        ended_at_max_turns,
        is_max_turns_reached,
        max_turns_attachment,
        next_turn_count,
        over_max_turns,
    )
    from agentbus_redis.model.limits.token_estimate import estimate_prompt_tokens

__all__ = [
    "ESCALATED_MAX_TOKENS",
    "default_max_tokens",
    "ended_at_max_turns",
    "estimate_prompt_tokens",
    "is_max_turns_reached",
    "max_tokens_upper_limit",
    "max_turns_attachment",
    "next_turn_count",
    "over_max_turns",
    "undated_model_id",
]

_MODULE_OF = {
    "ESCALATED_MAX_TOKENS": "max_tokens",
    "default_max_tokens": "max_tokens",
    "ended_at_max_turns": "max_turns",
    "estimate_prompt_tokens": "token_estimate",
    "is_max_turns_reached": "max_turns",
    "max_tokens_upper_limit": "max_tokens",
    "max_turns_attachment": "max_turns",
    "next_turn_count": "max_turns",
    "over_max_turns": "max_turns",
    "undated_model_id": "max_tokens",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
