"""The API normalization pipeline: Claude Code's ``normalizeMessagesForAPI`` and API-client steps
(§4), plus a safety finalizer so the request is never rejected by the Messages API."""

from __future__ import annotations

from agentbus_redis.normalize.api_client_steps import (
    apply_api_client_steps,
    strip_advisor_blocks,
    strip_excess_media_items,
    strip_tool_search_fields,
)
from agentbus_redis.normalize.attachments.order import reorder_attachments_for_api
from agentbus_redis.normalize.attachments.render import normalize_attachment_for_api
from agentbus_redis.normalize.normalize_for_api import normalize_messages_for_api
from agentbus_redis.normalize.options import LEGACY_TOOL_NAME_ALIASES, NormalizeOptions
from agentbus_redis.normalize.passes.merge import (
    merge_user_messages,
    merge_user_messages_and_tool_results,
    smoosh_into_tool_result,
)
from agentbus_redis.normalize.pipeline import NormalizedRequest, to_api_request, validate_request
from agentbus_redis.normalize.report import NormalizationReport, Repair, RepairKind
from agentbus_redis.normalize.safety.api_safety import make_api_safe
from agentbus_redis.normalize.to_params import message_to_param, to_messages_request

__all__ = [
    "LEGACY_TOOL_NAME_ALIASES",
    "NormalizationReport",
    "NormalizeOptions",
    "NormalizedRequest",
    "Repair",
    "RepairKind",
    "apply_api_client_steps",
    "make_api_safe",
    "merge_user_messages",
    "merge_user_messages_and_tool_results",
    "message_to_param",
    "normalize_attachment_for_api",
    "normalize_messages_for_api",
    "reorder_attachments_for_api",
    "smoosh_into_tool_result",
    "strip_advisor_blocks",
    "strip_excess_media_items",
    "strip_tool_search_fields",
    "to_api_request",
    "to_messages_request",
    "validate_request",
]
