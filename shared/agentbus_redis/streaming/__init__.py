"""Streaming replies (claude-code-messages.md §9): accumulation, replies kept between batches, live text, usage."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.streaming.accumulate import (
        REFUSAL_SUGGESTED_MODEL,
        AssistantMessageUpdated,
        StreamAccumulator,
        StreamOutput,
        apply_assistant_update,
        refusal_error_text,
    )
    from agentbus_redis.streaming.replies import DEFAULT_MAX_OUTPUT_TOKENS, OpenReply, ReplyProgress
    from agentbus_redis.streaming.usage import EMPTY_USAGE, update_usage

__all__ = [
    "DEFAULT_MAX_OUTPUT_TOKENS",
    "EMPTY_USAGE",
    "REFUSAL_SUGGESTED_MODEL",
    "AssistantMessageUpdated",
    "OpenReply",
    "ReplyProgress",
    "StreamAccumulator",
    "StreamOutput",
    "apply_assistant_update",
    "refusal_error_text",
    "update_usage",
]

_MODULE_OF = {
    "AssistantMessageUpdated": "accumulate",
    "DEFAULT_MAX_OUTPUT_TOKENS": "replies",
    "EMPTY_USAGE": "usage",
    "OpenReply": "replies",
    "REFUSAL_SUGGESTED_MODEL": "accumulate",
    "ReplyProgress": "replies",
    "StreamAccumulator": "accumulate",
    "StreamOutput": "accumulate",
    "apply_assistant_update": "accumulate",
    "refusal_error_text": "accumulate",
    "update_usage": "usage",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
