"""Tiny builders for the normalization tests: deterministic uuids, one timestamp, terse blocks."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import (
    ContentBlock,
    ImageBlock,
    ServerToolResultBlock,
    ServerToolUseBlock,
    TextBlock,
    ThinkingBlock,
    ToolReferenceBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, AssistantPayload, AttachmentMessage, UserMessage

TIMESTAMP = "2026-01-01T00:00:00.000Z"
_counter = itertools.count(1)


def uid() -> str:
    """A fresh UUID-shaped id (``…-8000-00000000000n``)."""
    return f"00000000-0000-4000-8000-{next(_counter):012x}"


def text(value: str) -> TextBlock:
    return TextBlock(text=value)


def tool_use(tool_id: str, name: str = "Bash", tool_input: JsonValue = None, **extra: JsonValue) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input=tool_input if tool_input is not None else {}, **extra)


def tool_result(
    tool_id: str, content: str | list[ContentBlock] | None = "ok", *, is_error: bool | None = None
) -> ToolResultBlock:
    if is_error is None:
        return ToolResultBlock(tool_use_id=tool_id, content=content)
    return ToolResultBlock(tool_use_id=tool_id, content=content, is_error=is_error)


def thinking(value: str = "hmm", signature: str | None = "sig-abc") -> ThinkingBlock:
    return ThinkingBlock(thinking=value, signature=signature)


def image(data: str = "iVBORw0KGgo=") -> ImageBlock:
    return ImageBlock(source={"type": "base64", "media_type": "image/png", "data": data})


def tool_reference(name: str) -> ToolReferenceBlock:
    return ToolReferenceBlock(tool_name=name)


def server_use(tool_id: str, name: str = "web_search") -> ServerToolUseBlock:
    return ServerToolUseBlock(id=tool_id, name=name, input={})


def server_result(tool_id: str, kind: str = "web_search_tool_result") -> ServerToolResultBlock:
    return ServerToolResultBlock.model_validate({"type": kind, "tool_use_id": tool_id, "content": []})


def user(content: str | Sequence[ContentBlock], *, uuid: str | None = None, **fields: JsonValue) -> UserMessage:
    message = create_user_message(content, uuid=uuid or uid(), timestamp=TIMESTAMP)
    return message.model_copy(update=fields) if fields else message


def assistant(
    *blocks: ContentBlock,
    msg_id: str | None = None,
    model: str = "claude-sonnet-4-5",
    uuid: str | None = None,
    **fields: JsonValue,
) -> AssistantMessage:
    payload = AssistantPayload(id=msg_id or f"msg_{uid()[-6:]}", model=model, content=list(blocks))
    return AssistantMessage(message=payload, uuid=uuid or uid(), timestamp=TIMESTAMP, **fields)


def attachment(data: JsonObject, *, uuid: str | None = None) -> AttachmentMessage:
    return AttachmentMessage(attachment=data, uuid=uuid or uid(), timestamp=TIMESTAMP)


def wire(message: ApiMessage) -> list[JsonObject]:
    """The message's blocks as wire JSON."""
    return [block.to_wire() for block in message.blocks]


def shape(messages: Sequence[object]) -> list[str]:
    """A compact picture of a message list: role (or type) plus block types."""
    out: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage | AssistantMessage):
            role = "U" if isinstance(message, UserMessage) else "A"
            out.append(f"{role}[{','.join(block.type for block in message.blocks)}]")
        else:
            out.append(str(getattr(message, "type", "?")))
    return out
