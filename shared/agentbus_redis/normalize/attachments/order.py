"""R5.3 ``reorderAttachmentsForAPI`` (the first step of R4.1)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, UserMessage

MessageT = TypeVar("MessageT")


def _is_stopping_point(message: object) -> bool:
    """An assistant message, or a user message whose array content starts with a tool_result."""
    if isinstance(message, AssistantMessage):
        return True
    if isinstance(message, UserMessage):
        content = message.message.content
        return not isinstance(content, str) and bool(content) and content[0].type == "tool_result"
    return False


def reorder_attachments_for_api(messages: Sequence[MessageT]) -> list[MessageT]:
    """R5.3: attachments bubble up past plain prompts, system and progress messages and settle right
    after the nearest assistant message or tool-result user message above them (original relative
    order kept); those with no stopping point above go to the very top. One bottom-up pass, O(n)."""
    reversed_result: list[MessageT] = []
    pending: list[MessageT] = []  # bottom-up, so in reverse input order
    for message in reversed(messages):
        if isinstance(message, AttachmentMessage):
            pending.append(message)
            continue
        if pending and _is_stopping_point(message):
            reversed_result.extend(pending)
            pending.clear()
        reversed_result.append(message)
    reversed_result.extend(pending)
    reversed_result.reverse()
    return reversed_result
