"""The request side of the Anthropic Messages API as TypedDicts, snake_case exactly as on the wire.

These types describe what agentbus *sends* (``POST /v1/messages``); the block models of
:mod:`agentbus_redis.messages.content` describe what it *reads*. Keys the API treats as optional are ``NotRequired``
(or the class is ``total=False`` with ``Required`` marking the mandatory keys). Every TypedDict comes
from ``typing_extensions`` and allows extra keys, so ``pydantic.TypeAdapter(MessagesRequest)`` works on
Python 3.11 and keeps fields a newer API version adds (beta features) instead of dropping them.

The rules a well-typed request must still satisfy (pairing, alternation, non-empty text…) are checked
by :mod:`agentbus_redis.api.validation`.
"""

from __future__ import annotations

from typing import Literal, NotRequired, Required, TypeAlias

from pydantic import ConfigDict, with_config
from typing_extensions import TypedDict

from agentbus_redis.json_types import JsonObject, JsonValue

_LOSSLESS = ConfigDict(extra="allow")

ServerToolResultType: TypeAlias = Literal[
    "mcp_tool_result",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "advisor_tool_result",
]
"""Assistant-side blocks that answer a ``server_tool_use``/``mcp_tool_use`` in the same message (R1.8)."""


@with_config(_LOSSLESS)
class CacheControlEphemeralParam(TypedDict):
    type: Literal["ephemeral"]
    ttl: NotRequired[Literal["5m", "1h"]]


@with_config(_LOSSLESS)
class TextBlockParam(TypedDict):
    type: Literal["text"]
    text: str
    citations: NotRequired[list[JsonObject] | None]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class Base64ImageSourceParam(TypedDict):
    type: Literal["base64"]
    media_type: Literal["image/jpeg", "image/png", "image/gif", "image/webp"]
    data: str


@with_config(_LOSSLESS)
class UrlImageSourceParam(TypedDict):
    type: Literal["url"]
    url: str


@with_config(_LOSSLESS)
class FileSourceParam(TypedDict):
    """A Files-API upload, usable as image or document source."""

    type: Literal["file"]
    file_id: str


ImageSourceParam: TypeAlias = Base64ImageSourceParam | UrlImageSourceParam | FileSourceParam


@with_config(_LOSSLESS)
class ImageBlockParam(TypedDict):
    type: Literal["image"]
    source: ImageSourceParam
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class Base64PdfSourceParam(TypedDict):
    type: Literal["base64"]
    media_type: Literal["application/pdf"]
    data: str


@with_config(_LOSSLESS)
class PlainTextSourceParam(TypedDict):
    type: Literal["text"]
    media_type: Literal["text/plain"]
    data: str


@with_config(_LOSSLESS)
class ContentBlockSourceParam(TypedDict):
    """A "custom content" document: the document is the given text/image blocks."""

    type: Literal["content"]
    content: str | list[TextBlockParam | ImageBlockParam]


@with_config(_LOSSLESS)
class UrlPdfSourceParam(TypedDict):
    type: Literal["url"]
    url: str


DocumentSourceParam: TypeAlias = (
    Base64PdfSourceParam | PlainTextSourceParam | ContentBlockSourceParam | UrlPdfSourceParam | FileSourceParam
)


@with_config(_LOSSLESS)
class DocumentBlockParam(TypedDict):
    type: Literal["document"]
    source: DocumentSourceParam
    title: NotRequired[str | None]
    context: NotRequired[str | None]
    citations: NotRequired[JsonObject | None]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class SearchResultBlockParam(TypedDict):
    type: Literal["search_result"]
    source: str
    title: str
    content: list[TextBlockParam]
    citations: NotRequired[JsonObject]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class ToolReferenceBlockParam(TypedDict):
    """Only ever inside ``tool_result.content`` (tool-search beta, R1.8)."""

    type: Literal["tool_reference"]
    tool_name: str


@with_config(_LOSSLESS)
class ToolUseBlockParam(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JsonObject
    caller: NotRequired[JsonObject]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


ToolResultContentParam: TypeAlias = (
    TextBlockParam | ImageBlockParam | DocumentBlockParam | SearchResultBlockParam | ToolReferenceBlockParam
)
"""What may appear inside ``tool_result.content`` (R1.8)."""


@with_config(_LOSSLESS)
class ToolResultBlockParam(TypedDict, total=False):
    type: Required[Literal["tool_result"]]
    tool_use_id: Required[str]
    content: str | list[ToolResultContentParam]
    is_error: bool
    cache_control: CacheControlEphemeralParam | None


@with_config(_LOSSLESS)
class ThinkingBlockParam(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


@with_config(_LOSSLESS)
class RedactedThinkingBlockParam(TypedDict):
    type: Literal["redacted_thinking"]
    data: str


@with_config(_LOSSLESS)
class ServerToolUseBlockParam(TypedDict):
    """``server_tool_use`` (web search, code execution, advisor…) and the MCP-connector ``mcp_tool_use``."""

    type: Literal["server_tool_use", "mcp_tool_use"]
    id: str
    name: str
    input: JsonObject
    server_name: NotRequired[str]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class ServerToolResultBlockParam(TypedDict):
    """Any server-side tool result, echoed back in the assistant message beside its ``server_tool_use``."""

    type: ServerToolResultType
    tool_use_id: str
    content: NotRequired[JsonValue]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


ContentBlockParam: TypeAlias = (
    TextBlockParam
    | ImageBlockParam
    | DocumentBlockParam
    | SearchResultBlockParam
    | ToolUseBlockParam
    | ToolResultBlockParam
    | ThinkingBlockParam
    | RedactedThinkingBlockParam
    | ServerToolUseBlockParam
    | ServerToolResultBlockParam
)
"""Any block of ``messages[].content`` (which role may carry which is checked by validation)."""


@with_config(_LOSSLESS)
class MessageParam(TypedDict):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlockParam]


@with_config(_LOSSLESS)
class SystemMessageParam(TypedDict):
    """A ``role: "system"`` message between the conversation's turns (the anthropic SDK's
    ``BetaSystemMessageParam``; Claude Code 2.1.332 sends its system-role attachments so, with the turn's
    ``output_config``). Checked by ``validate_api_request``."""

    role: Literal["system"]
    content: str | list[TextBlockParam | JsonObject]
    clear_at: NotRequired[Literal["next_user_message", "never"] | None]
    output_config: NotRequired[JsonObject | None]


@with_config(_LOSSLESS)
class ToolParam(TypedDict):
    """A client tool definition (``tools[]``); server tools are plain objects with a versioned ``type``."""

    name: str
    input_schema: JsonObject
    description: NotRequired[str]
    type: NotRequired[Literal["custom"] | None]
    cache_control: NotRequired[CacheControlEphemeralParam | None]


@with_config(_LOSSLESS)
class ThinkingConfigEnabledParam(TypedDict):
    type: Literal["enabled"]
    budget_tokens: int


@with_config(_LOSSLESS)
class ThinkingConfigAdaptiveParam(TypedDict):
    """Adaptive thinking (Claude 4.6 and later): the model decides how much to think."""

    type: Literal["adaptive"]


@with_config(_LOSSLESS)
class ThinkingConfigDisabledParam(TypedDict):
    type: Literal["disabled"]


ThinkingConfigParam: TypeAlias = ThinkingConfigEnabledParam | ThinkingConfigAdaptiveParam | ThinkingConfigDisabledParam


@with_config(_LOSSLESS)
class MessagesRequest(TypedDict, total=False):
    """The body of ``POST /v1/messages`` (the keys agentbus uses; others pass through)."""

    messages: Required[list[MessageParam | SystemMessageParam]]
    model: str
    max_tokens: int
    system: str | list[TextBlockParam]
    tools: list[ToolParam | JsonObject]
    tool_choice: JsonObject
    thinking: ThinkingConfigParam
    metadata: JsonObject
    stop_sequences: list[str]
    stream: bool
    temperature: float


__all__ = [
    "Base64ImageSourceParam",
    "Base64PdfSourceParam",
    "CacheControlEphemeralParam",
    "ContentBlockParam",
    "ContentBlockSourceParam",
    "DocumentBlockParam",
    "DocumentSourceParam",
    "FileSourceParam",
    "ImageBlockParam",
    "ImageSourceParam",
    "JsonValue",
    "MessageParam",
    "MessagesRequest",
    "PlainTextSourceParam",
    "RedactedThinkingBlockParam",
    "SearchResultBlockParam",
    "ServerToolResultBlockParam",
    "ServerToolResultType",
    "ServerToolUseBlockParam",
    "SystemMessageParam",
    "TextBlockParam",
    "ThinkingBlockParam",
    "ThinkingConfigAdaptiveParam",
    "ThinkingConfigDisabledParam",
    "ThinkingConfigEnabledParam",
    "ThinkingConfigParam",
    "ToolParam",
    "ToolReferenceBlockParam",
    "ToolResultBlockParam",
    "ToolResultContentParam",
    "ToolUseBlockParam",
    "UrlImageSourceParam",
    "UrlPdfSourceParam",
]
