"""The Python SDK: publish prompts, follow turns, answer approvals, replay transcripts — and write tools
(``@tool``, typed by a ``ToolInput`` model; ``agentbus worker tools --tools module:attribute`` runs them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.sdk.approvals import PendingApproval, answer_key, find_approval, follow_approvals
    from agentbus_redis.sdk.client import AgentbusClient, NotReplicated, PublishedRequest, RedisUnavailable
    from agentbus_redis.sdk.conversation import (
        ApiError,
        ApiRetry,
        AssistantMessageComplete,
        Conversation,
        ConversationEvent,
        ConversationTimeout,
        Interrupted,
        Notice,
        Retracted,
        TaskNotification,
        TaskProgress,
        TaskStarted,
        TextDelta,
        ThinkingDelta,
        ToolCall,
        ToolProgress,
        ToolResult,
        TurnEnd,
        converse,
    )
    from agentbus_redis.sdk.replay import (
        PUBLISH_CHUNK,
        RESUMED_TYPES,
        ProgressCallback,
        ReplayPlan,
        ReplayReport,
        plan_pi_replay,
        plan_replay,
        replay_transcript,
        wait_until_persisted,
    )
    from agentbus_redis.tools.function_tool import FunctionTool, tool
    from agentbus_redis.tools.tool import ToolContext, ToolError, ToolInput, ToolOutput

__all__ = [
    "PUBLISH_CHUNK",
    "RESUMED_TYPES",
    "AgentbusClient",
    "ApiError",
    "ApiRetry",
    "AssistantMessageComplete",
    "Conversation",
    "ConversationEvent",
    "ConversationTimeout",
    "FunctionTool",
    "Interrupted",
    "NotReplicated",
    "Notice",
    "PendingApproval",
    "ProgressCallback",
    "PublishedRequest",
    "RedisUnavailable",
    "ReplayPlan",
    "ReplayReport",
    "Retracted",
    "TaskNotification",
    "TaskProgress",
    "TaskStarted",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "ToolInput",
    "ToolOutput",
    "ToolProgress",
    "ToolResult",
    "TurnEnd",
    "answer_key",
    "converse",
    "find_approval",
    "follow_approvals",
    "plan_pi_replay",
    "plan_replay",
    "replay_transcript",
    "tool",
    "wait_until_persisted",
]

_MODULE_OF = {
    "AgentbusClient": "client",
    "ApiError": "conversation",
    "ApiRetry": "conversation",
    "AssistantMessageComplete": "conversation",
    "Conversation": "conversation",
    "ConversationEvent": "conversation",
    "ConversationTimeout": "conversation",
    "Interrupted": "conversation",
    "NotReplicated": "client",
    "Notice": "conversation",
    "PUBLISH_CHUNK": "replay",
    "PendingApproval": "approvals",
    "ProgressCallback": "replay",
    "PublishedRequest": "client",
    "RESUMED_TYPES": "replay",
    "RedisUnavailable": "client",
    "ReplayPlan": "replay",
    "ReplayReport": "replay",
    "Retracted": "conversation",
    "TaskNotification": "conversation",
    "TaskProgress": "conversation",
    "TaskStarted": "conversation",
    "TextDelta": "conversation",
    "ThinkingDelta": "conversation",
    "ToolCall": "conversation",
    "ToolProgress": "conversation",
    "ToolResult": "conversation",
    "TurnEnd": "conversation",
    "answer_key": "approvals",
    "converse": "conversation",
    "find_approval": "approvals",
    "follow_approvals": "approvals",
    "plan_pi_replay": "replay",
    "plan_replay": "replay",
    "replay_transcript": "replay",
    "wait_until_persisted": "replay",
    # Writing tools (issue 29): the Tool API of agentbus_redis.tools.
    "FunctionTool": "agentbus_redis.tools.function_tool",
    "ToolContext": "agentbus_redis.tools.tool",
    "ToolError": "agentbus_redis.tools.tool",
    "ToolInput": "agentbus_redis.tools.tool",
    "ToolOutput": "agentbus_redis.tools.tool",
    "tool": "agentbus_redis.tools.function_tool",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
