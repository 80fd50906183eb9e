"""The passes of Claude Code's ``normalizeMessagesForAPI`` (§4): the pre-pass that drops what never reaches the
API, the fold of messages into API turns, the user-message merges, the tool block rules, and the
passes after the fold."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.normalize.passes.content_ops import (
        is_js_blank,
        placeholder_text,
        with_assistant_content,
        with_content,
    )
    from agentbus_redis.normalize.passes.fold import fold_messages
    from agentbus_redis.normalize.passes.merge import (
        merge_user_messages,
        merge_user_messages_and_tool_results,
        smoosh_into_tool_result,
    )
    from agentbus_redis.normalize.passes.prepass import (
        build_media_strip_targets,
        drop_virtual_messages,
        filter_api_bound,
    )
    from agentbus_redis.normalize.passes.tool_blocks import strip_caller_fields, strip_tool_references

__all__ = [
    "build_media_strip_targets",
    "drop_virtual_messages",
    "filter_api_bound",
    "fold_messages",
    "is_js_blank",
    "merge_user_messages",
    "merge_user_messages_and_tool_results",
    "placeholder_text",
    "smoosh_into_tool_result",
    "strip_caller_fields",
    "strip_tool_references",
    "with_assistant_content",
    "with_content",
]

_MODULE_OF = {
    "build_media_strip_targets": "prepass",
    "drop_virtual_messages": "prepass",
    "filter_api_bound": "prepass",
    "fold_messages": "fold",
    "is_js_blank": "content_ops",
    "merge_user_messages": "merge",
    "merge_user_messages_and_tool_results": "merge",
    "placeholder_text": "content_ops",
    "smoosh_into_tool_result": "merge",
    "strip_caller_fields": "tool_blocks",
    "strip_tool_references": "tool_blocks",
    "with_assistant_content": "content_ops",
    "with_content": "content_ops",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
