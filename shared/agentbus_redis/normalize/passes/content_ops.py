"""Small content helpers shared by the passes: copies with new content, JavaScript-exact trimming,
and the block predicates Claude Code uses (``isToolResultMessage``, ``contentHasToolReference``)."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage

# JavaScript's String.prototype.trim removes WhiteSpace and LineTerminator code points; Python's
# str.strip() differs (it strips \x1c-\x1f and \x85, keeps \ufeff), so texts would diverge.
_JS_WHITESPACE = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def js_trim(text: str) -> str:
    """``text.trim()`` as JavaScript computes it."""
    return text.strip(_JS_WHITESPACE)


def js_trim_end(text: str) -> str:
    """``text.trimEnd()`` as JavaScript computes it."""
    return text.rstrip(_JS_WHITESPACE)


def is_js_blank(text: str) -> bool:
    """True when ``text.trim() === ''`` in JavaScript."""
    return not js_trim(text)


def with_user_content(message: UserMessage, content: str | Sequence[ContentBlock]) -> UserMessage:
    """A copy of ``message`` whose ``message.content`` is ``content`` (every other field kept)."""
    new_content: str | list[ContentBlock] = content if isinstance(content, str) else list(content)
    return message.model_copy(update={"message": message.message.model_copy(update={"content": new_content})})


def with_assistant_content(message: AssistantMessage, content: Sequence[ContentBlock]) -> AssistantMessage:
    """A copy of ``message`` whose ``message.content`` is ``content`` (every other field kept)."""
    return message.model_copy(update={"message": message.message.model_copy(update={"content": list(content)})})


def with_content(message: ApiMessage, content: Sequence[ContentBlock]) -> ApiMessage:
    """:func:`with_user_content` / :func:`with_assistant_content` for either role."""
    if isinstance(message, UserMessage):
        return with_user_content(message, content)
    return with_assistant_content(message, content)


def placeholder_text(text: str) -> TextBlock:
    """A text block as Claude Code builds its placeholders (``citations: []``)."""
    return TextBlock(text=text, citations=[])


def is_tool_result_message(message: ApiMessage) -> bool:
    """``isToolResultMessage``: a user message with array content holding a tool_result."""
    return (
        isinstance(message, UserMessage)
        and not isinstance(message.message.content, str)
        and any(block.type == "tool_result" for block in message.message.content)
    )


def tool_result_has_tool_reference(block: ContentBlock) -> bool:
    """A tool_result whose array content holds a ``tool_reference``."""
    return (
        isinstance(block, ToolResultBlock)
        and isinstance(block.content, list)
        and any(item.type == "tool_reference" for item in block.content)
    )


def content_has_tool_reference(content: Sequence[ContentBlock]) -> bool:
    """``contentHasToolReference``."""
    return any(tool_result_has_tool_reference(block) for block in content)


def array_content(message: UserMessage) -> list[ContentBlock] | None:
    """The content list of a user message, or ``None`` for string content."""
    content = message.message.content
    return None if isinstance(content, str) else list(content)
