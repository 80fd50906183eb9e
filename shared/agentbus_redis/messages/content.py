"""Content blocks of every Anthropic API type (R1.8), discriminated on ``type``.

Blocks of a type this module does not know (new server tools, beta features) parse as
:class:`UnknownBlock` and dump back unchanged, so a transcript written by a newer Claude Code
survives a round trip through agentbus.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, SerializeAsAny, TypeAdapter

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.wire import WireModel, only_routed_to


class TextBlock(WireModel):
    type: Literal["text"] = "text"
    text: str
    citations: list[JsonValue] | None = None


class ImageBlock(WireModel):
    type: Literal["image"] = "image"
    source: JsonObject


class DocumentBlock(WireModel):
    type: Literal["document"] = "document"
    source: JsonObject


class SearchResultBlock(WireModel):
    type: Literal["search_result"] = "search_result"


class ToolReferenceBlock(WireModel):
    """Only ever inside ``tool_result.content`` (tool-search beta, R1.8)."""

    type: Literal["tool_reference"] = "tool_reference"
    tool_name: str | None = None


class ToolUseBlock(WireModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: JsonValue = Field(default_factory=dict)


class ToolResultBlock(WireModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str | list[ContentBlock] | None = None
    is_error: bool | None = None


class ThinkingBlock(WireModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str | None = None


class RedactedThinkingBlock(WireModel):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ServerToolUseBlock(WireModel):
    """``server_tool_use`` and ``mcp_tool_use``: calls executed by the API, answered in the same reply."""

    type: Literal["server_tool_use", "mcp_tool_use"] = "server_tool_use"
    id: str
    name: str | None = None
    input: JsonValue = None


SERVER_RESULT_TYPES = (
    "mcp_tool_result",
    "web_search_tool_result",
    "web_fetch_tool_result",
    "code_execution_tool_result",
    "bash_code_execution_tool_result",
    "text_editor_code_execution_tool_result",
    "tool_search_tool_result",
    "advisor_tool_result",
)


class ServerToolResultBlock(WireModel):
    """A server-side tool result: lives in the *assistant* message next to its ``server_tool_use`` (R4.26)."""

    type: Literal[
        "mcp_tool_result",
        "web_search_tool_result",
        "web_fetch_tool_result",
        "code_execution_tool_result",
        "bash_code_execution_tool_result",
        "text_editor_code_execution_tool_result",
        "tool_search_tool_result",
        "advisor_tool_result",
    ]
    tool_use_id: str
    content: JsonValue = None


class UnknownBlock(WireModel):
    """Any block type agentbus does not model; kept verbatim."""

    type: str


_TAG_OF_TYPE: dict[str, str] = {
    "text": "text",
    "image": "image",
    "document": "document",
    "search_result": "search_result",
    "tool_reference": "tool_reference",
    "tool_use": "tool_use",
    "tool_result": "tool_result",
    "thinking": "thinking",
    "redacted_thinking": "redacted_thinking",
    "server_tool_use": "server_tool_use",
    "mcp_tool_use": "server_tool_use",
    **dict.fromkeys(SERVER_RESULT_TYPES, "server_tool_result"),
}


_REQUIRED_STRINGS: dict[str, tuple[str, ...]] = {
    "text": ("text",),
    "tool_use": ("id", "name"),
    "server_tool_use": ("id",),
    "tool_result": ("tool_use_id",),
    "server_tool_result": ("tool_use_id",),
    "thinking": ("thinking",),
    "redacted_thinking": ("data",),
}
_REQUIRED_OBJECTS: dict[str, tuple[str, ...]] = {"image": ("source",), "document": ("source",)}


def _block_tag(value: Any) -> str:
    """Route a block to its model; a known type missing a required string field (real transcripts
    drift, hand-made fixtures omit ids) or an image/document without its ``source`` object is kept
    verbatim as :class:`UnknownBlock` instead of failing the whole message, and :func:`is_malformed`
    lets the normalizer keep it away from the API."""
    if isinstance(value, UnknownBlock):
        return "unknown"
    if isinstance(value, WireModel):
        return _TAG_OF_TYPE.get(str(getattr(value, "type", "")), "unknown")
    if not isinstance(value, dict):
        return "invalid"
    block_type = value.get("type")
    if not isinstance(block_type, str):
        return "invalid"
    tag = _TAG_OF_TYPE.get(block_type, "unknown")
    if any(not isinstance(value.get(key), str) for key in _REQUIRED_STRINGS.get(tag, ())):
        return "unknown"
    if any(not isinstance(value.get(key), dict) for key in _REQUIRED_OBJECTS.get(tag, ())):
        return "unknown"
    return tag


_KnownBlock = Annotated[
    TextBlock
    | ImageBlock
    | DocumentBlock
    | SearchResultBlock
    | ToolReferenceBlock
    | ToolUseBlock
    | ToolResultBlock
    | ThinkingBlock
    | RedactedThinkingBlock
    | ServerToolUseBlock
    | ServerToolResultBlock,
    Field(discriminator="type"),
]

# The literal discriminator is looked up in Rust (no Python per block, and ``validate_json`` never
# builds a dict for it); :class:`UnknownBlock` catches exactly what :func:`_block_tag` routes to it:
# an unknown ``type``, or a known one missing a required string field.
ContentBlock = Annotated[
    _KnownBlock | Annotated[UnknownBlock, BeforeValidator(only_routed_to("unknown", _block_tag))],
    Field(union_mode="left_to_right"),
    SerializeAsAny(),  # dumped by the value's own model (see wire.py)
]
"""Any content block, user- or assistant-side."""

ToolResultBlock.model_rebuild()

CONTENT_BLOCK_ADAPTER: TypeAdapter[ContentBlock] = TypeAdapter(ContentBlock)
CONTENT_BLOCKS_ADAPTER: TypeAdapter[list[ContentBlock]] = TypeAdapter(list[ContentBlock])

THINKING_TYPES = frozenset({"thinking", "redacted_thinking"})


def is_malformed(block: ContentBlock) -> bool:
    """True for a block of a known API type that could not be modelled (e.g. a tool_use without id)."""
    return isinstance(block, UnknownBlock) and block.type in _TAG_OF_TYPE


def is_thinking(block: ContentBlock) -> bool:
    """True for ``thinking`` and ``redacted_thinking`` blocks."""
    return block.type in THINKING_TYPES


def is_blank_text(block: ContentBlock) -> bool:
    """True for a text block whose text is empty or whitespace only (API §1.8)."""
    return isinstance(block, TextBlock) and not block.text.strip()


def carries_tool_use_id(block: ContentBlock) -> bool:
    """Any block with a string ``tool_use_id`` is a result of some tool (R1.8)."""
    if isinstance(block, ToolResultBlock | ServerToolResultBlock):
        return True
    extra = block.model_extra or {}
    return isinstance(extra.get("tool_use_id"), str)


def tool_use_id_of(block: ContentBlock) -> str | None:
    """The ``tool_use_id`` a result block answers, if any."""
    if isinstance(block, ToolResultBlock | ServerToolResultBlock):
        return block.tool_use_id
    value = (block.model_extra or {}).get("tool_use_id")
    return value if isinstance(value, str) else None


def text_block(text: str) -> TextBlock:
    """A plain text block."""
    return TextBlock(text=text)


def as_blocks(content: str | list[ContentBlock]) -> list[ContentBlock]:
    """String content becomes one text block (how the API reads a string)."""
    return [_string_block(content)] if isinstance(content, str) else list(content)


@lru_cache(maxsize=256)
def _string_block(text: str) -> TextBlock:
    """The text block of a string content. Cached: the normalization passes ask a message for its blocks
    about eight times per request, and a prompt's block was built each time (a frozen model, shared as a
    list content's blocks are)."""
    return TextBlock(text=text)
