"""Conversion of normalized messages to the Messages API request shape (plain JSON dicts typed by
:mod:`agentbus_redis.api.types`). Blocks are dumped with ``to_wire()``, so whatever was read — a thinking
block's text and signature above all — is sent byte-identical."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from agentbus_redis.api.types import ContentBlockParam, MessageParam, MessagesRequest, ToolUseBlockParam
from agentbus_redis.messages.content import ContentBlock, ToolUseBlock
from agentbus_redis.messages.kinds import ApiMessage, UserMessage


def block_to_param(block: ContentBlock, *, tool_search_enabled: bool = False) -> ContentBlockParam:
    """One block as its API param; without tool search a tool_use is exactly ``{type, id, name,
    input}`` (R4.7: ``caller`` and any other stored key is only valid with the beta)."""
    if isinstance(block, ToolUseBlock) and not tool_search_enabled:
        tool_use: ToolUseBlockParam = {
            "type": "tool_use",
            "id": block.id,
            "name": block.name,
            "input": block.input if isinstance(block.input, dict) else {},
        }
        return tool_use
    return cast("ContentBlockParam", block.to_wire())


def message_to_param(message: ApiMessage, *, tool_search_enabled: bool = False) -> MessageParam:
    """A user message keeps string content as a string; an assistant's content is always a list."""
    content = message.message.content
    if isinstance(message, UserMessage) and isinstance(content, str):
        return {"role": "user", "content": content}
    params = [block_to_param(block, tool_search_enabled=tool_search_enabled) for block in message.blocks]
    return {"role": "user" if isinstance(message, UserMessage) else "assistant", "content": params}


def to_messages_request(
    messages: Sequence[ApiMessage], *, tool_search_enabled: bool = False, model: str | None = None
) -> MessagesRequest:
    """The request body: ``messages`` (and ``model`` when known)."""
    request: MessagesRequest = {
        "messages": [message_to_param(message, tool_search_enabled=tool_search_enabled) for message in messages]
    }
    if model is not None:
        request["model"] = model
    return request
